# Run by CPack after it built the Debian packages (CPACK_POST_BUILD_SCRIPTS,
# cmake/packaging.cmake). CPack 3.25 gives every package that ships a shared
# library in /usr/lib a postinst and a postrm that only call ldconfig; Debian
# policy (and lintian) want the dpkg trigger "activate-noawait ldconfig"
# instead. Each such package is unpacked, the two scripts are replaced by the
# trigger, and it is built again. A script that does anything else is left
# alone and fails the build: it is not the one this file knows.
foreach(deb IN LISTS CPACK_PACKAGE_FILES)
  set(dir "${deb}.unpacked")
  file(REMOVE_RECURSE "${dir}")
  execute_process(COMMAND dpkg-deb --raw-extract "${deb}" "${dir}" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "dpkg-deb cannot unpack ${deb}")
  endif()
  set(rebuild OFF)
  foreach(script IN ITEMS postinst postrm)
    set(path "${dir}/DEBIAN/${script}")
    if(EXISTS "${path}")
      file(READ "${path}" body)
      string(REGEX REPLACE "#![^\n]*|set -e|if \\[ \"\\$1\" = \"(configure|remove)\" \\]; then|ldconfig|fi|[ \t\n]" ""
             rest "${body}")
      if(NOT rest STREQUAL "" OR NOT body MATCHES "ldconfig")
        message(FATAL_ERROR "${deb}: ${script} is not CPack's ldconfig call:\n${body}")
      endif()
      file(REMOVE "${path}")
      set(rebuild ON)
    endif()
  endforeach()
  if(rebuild)
    file(WRITE "${dir}/DEBIAN/triggers" "activate-noawait ldconfig\n")
    execute_process(COMMAND dpkg-deb --root-owner-group --build "${dir}" "${deb}"
                    OUTPUT_QUIET RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
      message(FATAL_ERROR "dpkg-deb cannot rebuild ${deb}")
    endif()
  endif()
  file(REMOVE_RECURSE "${dir}")
endforeach()

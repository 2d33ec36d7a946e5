# idemledger_install_manpage(SOURCE COMPONENT)
#
# Installs deploy/man/<name>.<section> to man<section>, compressed with
# gzip -9n as Debian wants it (no name, no time stamp: the same bytes from
# every build). Compressed at configure time; editing the page reconfigures.
function(idemledger_gzip source output)
  execute_process(COMMAND gzip -9nc ${source} OUTPUT_FILE ${output} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gzip ${source} failed")
  endif()
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${source})
endfunction()

function(idemledger_install_manpage source component)
  get_filename_component(name ${source} NAME)
  string(REGEX MATCH "[0-9]$" section ${name})
  set(gz ${PROJECT_BINARY_DIR}/man/${name}.gz)
  file(MAKE_DIRECTORY ${PROJECT_BINARY_DIR}/man)
  idemledger_gzip(${source} ${gz})
  install(FILES ${gz} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section} COMPONENT ${component})
endfunction()

# cmake -DMODE=find_package|fetchcontent -DSOURCE=... -DBINARY=... [-DPREFIX=...]
#       [-DIDEMLEDGER_GIT=...] [-DWITHOUT=pkg,pkg] [-DFORBID_LINK=regex] [-DFORBID_WERROR=ON]
#
# Configures, builds and runs a consumer project; any failure fails the test.
#   WITHOUT        packages the consumer's configure must not need: each is
#                  hidden (CMAKE_DISABLE_FIND_PACKAGE_<pkg>), as on a machine
#                  without them.
#   FORBID_LINK    a regex no library on the consumer's link line may match.
#   FORBID_WERROR  idemledger's own sources, built as a subproject, must not
#                  get -Werror (a host's newer compiler must not break its build).
file(REMOVE_RECURSE ${BINARY})
set(args -S ${SOURCE} -B ${BINARY} -G Ninja -DCONSUMER_MODE=${MODE})
string(REPLACE "," ";" WITHOUT "${WITHOUT}")
foreach(pkg IN LISTS WITHOUT)
  list(APPEND args -DCMAKE_DISABLE_FIND_PACKAGE_${pkg}=ON)
endforeach()
if(MODE STREQUAL "find_package")
  list(APPEND args -DCMAKE_PREFIX_PATH=${PREFIX})
else()
  # The repository's committed HEAD, as a user's FetchContent would see it.
  execute_process(COMMAND git -C ${IDEMLEDGER_GIT} rev-parse HEAD OUTPUT_VARIABLE head
                  OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "FetchContent check needs a git checkout of idemledger")
  endif()
  list(APPEND args -DIDEMLEDGER_GIT=${IDEMLEDGER_GIT} -DIDEMLEDGER_TAG=${head})
endif()
foreach(step IN ITEMS configure build run)
  if(step STREQUAL "configure")
    set(cmd ${CMAKE_COMMAND} ${args})
  elseif(step STREQUAL "build")
    set(cmd ${CMAKE_COMMAND} --build ${BINARY} -j2)
  else()
    set(cmd ${BINARY}/consumer)
  endif()
  execute_process(COMMAND ${cmd} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "consumer ${step} failed (${MODE})")
  endif()
endforeach()

# What was actually run: the link command of the consumer, and the compile
# commands of idemledger's sources when it was built as a subproject.
execute_process(COMMAND ninja -C ${BINARY} -t commands consumer OUTPUT_VARIABLE commands
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cannot list the consumer's build commands")
endif()
if(FORBID_LINK)
  string(REGEX MATCH "[^\n]*-o consumer [^\n]*" link_line "${commands}")
  if(NOT link_line)
    message(FATAL_ERROR "no link command for the consumer found")
  endif()
  execute_process(COMMAND ldd ${BINARY}/consumer OUTPUT_VARIABLE libraries)
  foreach(what IN ITEMS link_line libraries)
    string(REGEX MATCH "${FORBID_LINK}" found "${${what}}")
    if(found)
      message(FATAL_ERROR "the consumer's ${what} holds \"${found}\":\n${${what}}")
    endif()
  endforeach()
  message(STATUS "link line and loaded libraries free of ${FORBID_LINK}:\n${link_line}")
endif()
if(FORBID_WERROR)
  string(REGEX MATCHALL "[^\n]*idemledger-src/src/[^\n]*" ours "${commands}")
  if(NOT ours)
    message(FATAL_ERROR "no compile command of idemledger's sources found")
  endif()
  string(FIND "${ours}" "-Werror" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "idemledger's sources were compiled with -Werror as a subproject")
  endif()
endif()

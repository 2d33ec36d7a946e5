# cmake -DSOURCE=... -DBINARY=... -DPREFIX=... -DLIBDIR=... -P build_make_consumer.cmake
#
# Builds the Makefile consumer against a static install in PREFIX through its
# pkg-config files alone (every library the archives use must be named for
# them to link), then runs it; with $IDEMLEDGER_TEST_DSN set, it applies a
# deposit twice on that server.
file(REMOVE_RECURSE ${BINARY})
file(COPY ${SOURCE}/ DESTINATION ${BINARY})
execute_process(
  COMMAND ${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${PREFIX}/${LIBDIR}/pkgconfig
          make -s -C ${BINARY} consumer "PKG_CONFIG=pkg-config --define-variable=prefix=${PREFIX}"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the Makefile consumer did not build through pkg-config")
endif()
execute_process(COMMAND ${BINARY}/consumer RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the Makefile consumer failed (${rc})")
endif()

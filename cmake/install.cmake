include(CMakePackageConfigHelpers)

# One export set per module: a consumer's find_package(... COMPONENTS ...)
# loads only the components asked for (and what they need).
foreach(m IN LISTS IDEMLEDGER_MODULES)
  install(TARGETS idemledger_${m} EXPORT idemledger_${m}_targets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(DIRECTORY include/idemledger/${m} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/idemledger)
  install(EXPORT idemledger_${m}_targets NAMESPACE idemledger::
          FILE idemledger-${m}-targets.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/idemledger)
endforeach()
install(TARGETS idemledger EXPORT idemledger_umbrella_targets)
install(EXPORT idemledger_umbrella_targets NAMESPACE idemledger::
        FILE idemledger-umbrella-targets.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/idemledger)
install(FILES include/idemledger.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/idemledger/core/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/idemledger/core)

set(IDEMLEDGER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/idemledger)
configure_package_config_file(cmake/idemledgerConfig.cmake.in
  ${PROJECT_BINARY_DIR}/idemledgerConfig.cmake
  INSTALL_DESTINATION ${IDEMLEDGER_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/idemledgerConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/idemledgerConfig.cmake
              ${PROJECT_BINARY_DIR}/idemledgerConfigVersion.cmake
        DESTINATION ${IDEMLEDGER_CMAKE_DIR})

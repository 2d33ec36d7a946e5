include(CMakePackageConfigHelpers)

install(TARGETS idemledger idemledger_pg EXPORT idemledgerTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/ ${PROJECT_BINARY_DIR}/include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set(IDEMLEDGER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/idemledger)
install(EXPORT idemledgerTargets NAMESPACE idemledger:: DESTINATION ${IDEMLEDGER_CMAKE_DIR})
configure_package_config_file(cmake/idemledgerConfig.cmake.in
  ${PROJECT_BINARY_DIR}/idemledgerConfig.cmake
  INSTALL_DESTINATION ${IDEMLEDGER_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/idemledgerConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/idemledgerConfig.cmake
              ${PROJECT_BINARY_DIR}/idemledgerConfigVersion.cmake
        DESTINATION ${IDEMLEDGER_CMAKE_DIR})

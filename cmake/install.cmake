include(CMakePackageConfigHelpers)

# One export set per module: a consumer's find_package(... COMPONENTS ...)
# loads only the components asked for (and what they need).
#
# Install components follow the Debian packages (cmake/packaging.cmake): a
# shared library goes to lib<module> (one runtime package per module), and
# everything a build needs (headers, the .so link, static archives, CMake and
# pkg-config files) to dev.
foreach(m IN LISTS IDEMLEDGER_MODULES)
  install(TARGETS idemledger_${m} EXPORT idemledger_${m}_targets
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT lib${m} NAMELINK_COMPONENT dev
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT lib${m}
    INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  install(DIRECTORY include/idemledger/${m} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/idemledger
          COMPONENT dev)
  install(EXPORT idemledger_${m}_targets NAMESPACE idemledger::
          FILE idemledger-${m}-targets.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/idemledger
          COMPONENT dev)
endforeach()
install(TARGETS idemledger EXPORT idemledger_umbrella_targets COMPONENT dev)
install(EXPORT idemledger_umbrella_targets NAMESPACE idemledger::
        FILE idemledger-umbrella-targets.cmake DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/idemledger
        COMPONENT dev)
install(FILES include/idemledger.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
install(FILES ${PROJECT_BINARY_DIR}/include/idemledger/core/version.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/idemledger/core COMPONENT dev)

if(BUILD_SHARED_LIBS)
  set(IDEMLEDGER_SHARED ON)
else()
  set(IDEMLEDGER_SHARED OFF)
endif()
set(IDEMLEDGER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/idemledger)
# The module graph for the package file: set(_idemledger_needs_<m> ...).
set(IDEMLEDGER_NEEDS_CMAKE "")
foreach(m IN LISTS IDEMLEDGER_MODULES)
  get_property(_needs GLOBAL PROPERTY IDEMLEDGER_NEEDS_${m})
  if(_needs)
    string(JOIN " " _needs ${_needs})
    string(APPEND IDEMLEDGER_NEEDS_CMAKE "set(_idemledger_needs_${m} ${_needs})\n")
  endif()
endforeach()
string(STRIP "${IDEMLEDGER_NEEDS_CMAKE}" IDEMLEDGER_NEEDS_CMAKE)
string(JOIN " " IDEMLEDGER_MODULES_LIST ${IDEMLEDGER_MODULES})
configure_package_config_file(cmake/idemledgerConfig.cmake.in
  ${PROJECT_BINARY_DIR}/idemledgerConfig.cmake
  INSTALL_DESTINATION ${IDEMLEDGER_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/idemledgerConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/idemledgerConfig.cmake
              ${PROJECT_BINARY_DIR}/idemledgerConfigVersion.cmake
        DESTINATION ${IDEMLEDGER_CMAKE_DIR} COMPONENT dev)

# pkg-config, for builds without CMake: idemledger-<module>.pc per module and
# idemledger.pc for all of them. What a module's headers expose (Abseil, the
# modules below it) is Requires; what only its library uses is
# Requires.private when the library is shared (it carries its own), and plain
# Requires when it is a static archive, whose consumer must link it. (Not
# --static: Debian's libpq.pc then asks for libpq's own static dependencies,
# which Debian does not ship.)
# The modules below each one come from the module graph (idemledger_module).
set(_pc_external_core
    "absl_status absl_statusor absl_strings absl_time absl_flat_hash_map prometheus-cpp-core")
set(_pc_private_core "fmt")
set(_pc_private_ledger "fmt libcrypto")
set(_pc_private_queue "fmt libcrypto")
set(_pc_private_relay "fmt")
set(_pc_libs_private_relay "-pthread")
set(_pc_private_ops "fmt")
set(_pc_private_pg "fmt libpq")
set(_pc_private_eth "fmt")
set(_pc_dir ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
foreach(m IN LISTS IDEMLEDGER_MODULES)
  if(NOT DEFINED _pc_private_${m})
    message(FATAL_ERROR "cmake/install.cmake: module ${m} has no pkg-config requirements")
  endif()
  get_property(_uses GLOBAL PROPERTY IDEMLEDGER_USES_${m})
  list(TRANSFORM _uses PREPEND "idemledger-")
  list(APPEND _uses ${_pc_external_${m}})
  string(JOIN " " _pc_requires_${m} ${_uses})
  set(PC_NAME idemledger-${m})
  set(PC_DESCRIPTION "idemledger ${m} module")
  set(PC_LIBS "-L\${libdir} -lidemledger_${m}")
  if(IDEMLEDGER_SHARED)
    set(PC_REQUIRES "${_pc_requires_${m}}")
    set(PC_REQUIRES_PRIVATE "${_pc_private_${m}}")
    set(PC_LIBS_PRIVATE "${_pc_libs_private_${m}}")
  else()
    set(PC_REQUIRES "${_pc_requires_${m}} ${_pc_private_${m}}")
    set(PC_REQUIRES_PRIVATE "")
    string(APPEND PC_LIBS " ${_pc_libs_private_${m}}")
    set(PC_LIBS_PRIVATE "")
  endif()
  configure_file(cmake/idemledger.pc.in ${PROJECT_BINARY_DIR}/pkgconfig/idemledger-${m}.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/idemledger-${m}.pc DESTINATION ${_pc_dir}
          COMPONENT dev)
endforeach()
set(PC_NAME idemledger)
set(PC_DESCRIPTION "idemledger: payment events applied to balances in PostgreSQL exactly once")
list(TRANSFORM IDEMLEDGER_MODULES PREPEND "idemledger-" OUTPUT_VARIABLE PC_REQUIRES)
string(JOIN " " PC_REQUIRES ${PC_REQUIRES})
set(PC_REQUIRES_PRIVATE "")
set(PC_LIBS "")
set(PC_LIBS_PRIVATE "")
configure_file(cmake/idemledger.pc.in ${PROJECT_BINARY_DIR}/pkgconfig/idemledger.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/idemledger.pc DESTINATION ${_pc_dir} COMPONENT dev)

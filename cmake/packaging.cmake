# Debian packages with CPack (scripts/package.sh builds and checks them):
#
#   libidemledger-<module><soversion>  one shared library per module, so a host
#                                      that links only core never pulls in
#                                      libpq or OpenSSL
#   libidemledger-dev                  headers, the .so links, CMake config,
#                                      pkg-config files
#   idemledger-admin                   the admin CLI
#   idemledger-services                the three daemons and their systemd units
#
# Each package carries the files Debian policy asks of it (copyright,
# changelog.Debian.gz, manual pages), so lintian finds nothing to say. Only
# with -DIDEMLEDGER_DEB=ON: a plain `cmake --install` gets none of this.
if(NOT BUILD_SHARED_LIBS)
  message(FATAL_ERROR "IDEMLEDGER_DEB needs -DBUILD_SHARED_LIBS=ON: the runtime packages hold shared libraries")
endif()
if(NOT IDEMLEDGER_INSTALL OR NOT IDEMLEDGER_BUILD_TOOLS OR NOT IDEMLEDGER_BUILD_EXAMPLES)
  message(FATAL_ERROR "IDEMLEDGER_DEB packages the install rules, the admin CLI and the services: keep install, tools and examples on")
endif()

set(_soversion ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
# Native packages: we are upstream, so the version has no Debian revision and
# the changelog is changelog.gz.
set(IDEMLEDGER_DEB_VERSION ${PROJECT_VERSION})
set(_deb ${PROJECT_BINARY_DIR}/deb)

configure_file(deploy/debian/changelog.in ${_deb}/changelog @ONLY)
idemledger_gzip(${_deb}/changelog ${_deb}/changelog.gz)

# component → package name, section, summary, description
set(_packages "")
foreach(m IN LISTS IDEMLEDGER_MODULES)
  list(APPEND _packages lib${m})
  set(_name_lib${m} libidemledger-${m}${_soversion})
  set(_section_lib${m} libs)
  set(_summary_lib${m} "idemledger ${m} module (shared library)")
endforeach()
# Extended descriptions: lines under 80 characters (lintian).
set(_about "idemledger applies at-least-once payment events to balances in
PostgreSQL exactly once: double-entry postings per asset, holds for
withdrawals, a queue, a delivery relay and the operations around them.")
set(_desc_libcore "Amounts, event types, statuses, the connection interface, retries,
alerts, logs and metrics.")
set(_desc_libledger "The exactly-once apply, postings, holds, assets, migrations and dead
letters.")
set(_desc_libqueue "Webhook intake and the dispatcher that uses PostgreSQL as the queue.")
set(_desc_librelay "Outbox delivery to an external API, its policies and the shared
circuit breaker.")
set(_desc_libops "Reconciliation, monitors, cleanup and partitioning.")
set(_desc_libpg "The libpq connection and the validated pool.")
set(_desc_libeth "Ethereum finality over JSON-RPC.")

list(APPEND _packages dev admin services)
set(_name_dev libidemledger-dev)
set(_section_dev libdevel)
set(_summary_dev "idemledger development files")
set(_desc_dev "Headers, the CMake package (find_package(idemledger)) and pkg-config
files (idemledger and idemledger-<module>) for building against the
libraries.")
set(_name_admin idemledger-admin)
set(_section_admin admin)
set(_summary_admin "idemledger admin CLI")
set(_desc_admin "Migrations, dead letters, reconciliation, cleanup, partitions, assets
and the relay's state, from the command line.")
set(_name_services idemledger-services)
set(_section_services net)
set(_summary_services "idemledger services: webhook intake, outbox worker, relay")
set(_desc_services "The three daemons with sandboxed systemd units: the webhook intake
records signed provider webhooks, the outbox worker applies them to the
ledger, and the notification relay delivers the ledger's outbox to an HTTP
API.")

# What each package depends on beyond the shared libraries dpkg-shlibdeps finds.
set(_exact "(= ${IDEMLEDGER_DEB_VERSION})")
foreach(m IN LISTS IDEMLEDGER_MODULES)  # the module graph (idemledger_module)
  get_property(_needs GLOBAL PROPERTY IDEMLEDGER_NEEDS_${m})
  list(TRANSFORM _needs REPLACE "^(.+)$" "libidemledger-\\1${_soversion} ${_exact}")
  string(JOIN ", " _depends_lib${m} ${_needs})
endforeach()
set(_all_libs "")
foreach(m IN LISTS IDEMLEDGER_MODULES)
  list(APPEND _all_libs "libidemledger-${m}${_soversion} ${_exact}")
endforeach()
string(JOIN ", " _all_libs ${_all_libs})
# The headers use Abseil; pkg-config's Requires.private name fmt, OpenSSL and libpq.
set(_depends_dev
    "${_all_libs}, libabsl-dev, libfmt-dev, libssl-dev, libpq-dev, prometheus-cpp-dev, pkg-config")
set(_depends_admin "${_all_libs}")
set(_depends_services "${_all_libs}")

foreach(c IN LISTS _packages)
  string(TOUPPER ${c} C)
  set(CPACK_DEBIAN_${C}_PACKAGE_NAME ${_name_${c}})
  set(CPACK_DEBIAN_${C}_PACKAGE_SECTION ${_section_${c}})
  set(CPACK_DEBIAN_${C}_PACKAGE_DEPENDS "${_depends_${c}}")
  set(_d "${_desc_${c}}")
  if(c MATCHES "^lib" AND NOT c STREQUAL "dev")
    set(_d "${_d}\n\n${_about}")
  endif()
  set(CPACK_DEBIAN_${C}_DESCRIPTION "${_summary_${c}}\n${_d}")
  install(FILES deploy/debian/copyright ${_deb}/changelog.gz
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/${_name_${c}} COMPONENT ${c})
endforeach()
set(CPACK_COMPONENTS_ALL ${_packages})

# Each service's settings page and example environment.
foreach(service IN ITEMS webhook_intake outbox_worker notification_relay)
  string(REPLACE "_" "-" env "${service}")
  install(FILES examples/${service}/README.md DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/idemledger-services
          RENAME README.${service}.md COMPONENT services)
  install(FILES deploy/systemd/${env}.env.example
          DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/idemledger-services/examples COMPONENT services)
endforeach()

# What the packages hold, and nothing else (scripts/package.sh builds this).
add_custom_target(idemledger_deb_contents)
list(TRANSFORM IDEMLEDGER_MODULES PREPEND "idemledger_" OUTPUT_VARIABLE _module_targets)
add_dependencies(idemledger_deb_contents ${_module_targets} idemledger-admin webhook_intake
                 outbox_worker notification_relay)

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME idemledger)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "idemledger developers <dev@idemledger.invalid>")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# Our own libraries are found in the build tree; their packages are named
# above, since no installed package provides them yet.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${PROJECT_BINARY_DIR})
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_PACKAGE_DIRECTORY ${PROJECT_BINARY_DIR}/packages)
# CPack (3.25) has each library package call ldconfig from postinst and
# postrm; Debian replaced that with a dpkg trigger. The script swaps them.
set(CPACK_POST_BUILD_SCRIPTS ${PROJECT_SOURCE_DIR}/cmake/deb_ldconfig_trigger.cmake)
include(CPack)

# Every dependency comes from a Debian 12 package (scripts/install-deps.sh).
# The same calls appear in idemledgerConfig.cmake.in so consumers resolve the
# same packages in the same mode.
find_package(absl CONFIG REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(PostgreSQL REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)

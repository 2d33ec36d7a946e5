# Every dependency comes from a Debian 12 package (scripts/install-deps.sh).
# idemledgerConfig.cmake.in asks consumers for the ones a component needs at
# link time, in the same mode; header-only ones (Boost, nlohmann-json) are
# build-only and never asked for.
find_package(absl CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(Boost 1.74 REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(PostgreSQL REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)
find_package(Threads REQUIRED)
# prometheus-cpp (Debian's prometheus-cpp-dev): the library's instruments.
find_package(prometheus-cpp CONFIG REQUIRED)

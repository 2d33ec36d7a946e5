#!/usr/bin/env bash
# Builds idemledger's Debian packages (cmake/packaging.cmake), holds them to
# lintian, installs them on this machine with apt, and builds and runs a host
# program against what was installed — once with CMake's find_package, once
# with a plain Makefile and pkg-config — which applies a deposit twice on a
# private PostgreSQL through the installed shared libraries. The packages are
# removed again on exit.
#
# usage: bash scripts/package.sh [BUILD_DIR]     (as root; default build-deb)
# The .deb files stay in BUILD_DIR/packages.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
build=$(realpath -m "${1:-build-deb}")
[[ $(id -u) -eq 0 ]] || { echo "package: run as root (the packages are installed with apt)" >&2; exit 1; }
bash scripts/install-deps.sh lintian dpkg-dev

section() { printf '\n-- package: %s\n' "$1"; }

section "build (shared libraries, Debian's hardening flags)"
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
CXXFLAGS="$(dpkg-buildflags --get CXXFLAGS) $(dpkg-buildflags --get CPPFLAGS)" \
  LDFLAGS="$(dpkg-buildflags --get LDFLAGS)" \
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_INSTALL_PREFIX=/usr -DIDEMLEDGER_DEB=ON -DIDEMLEDGER_BUILD_TESTS=OFF \
  -DIDEMLEDGER_BUILD_BENCH=OFF >/dev/null
# What the packages hold, and nothing else (no quickstart, simulator, mock).
cmake --build "$build" -j2 --target idemledger_deb_contents
rm -rf "$build/packages"
(cd "$build" && cpack >/dev/null)
mapfile -t debs < <(ls "$build"/packages/*.deb)
for deb in "${debs[@]}"; do
  dpkg-deb --field "$deb" Package Version Depends | sed 's/^/  /'
done

section "lintian (any error or warning fails)"
lintian --fail-on error,warning --tag-display-limit 0 "${debs[@]}"
echo "lintian: ${#debs[@]} packages clean"

section "install with apt (dependencies resolved from the archive)"
packages=()
for deb in "${debs[@]}"; do packages+=("$(dpkg-deb --field "$deb" Package)"); done
cleanup() {
  DEBIAN_FRONTEND=noninteractive apt-get purge -y -qq "${packages[@]}" >/dev/null 2>&1 || true
  rm -rf "$work"
}
work=$(mktemp -d)
trap cleanup EXIT
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  "${debs[@]}" >/dev/null
dpkg-query -W -f='  ${Package} ${Version} ${Status}\n' "${packages[@]}"
# The installed CLI and services start and refuse a missing setting by name.
for binary in admin webhook-intake outbox-worker notification-relay; do
  rc=0
  out=$(env -i "/usr/bin/idemledger-$binary" status 2>&1) || rc=$?
  [[ $rc -eq 2 && $out == *IDEMLEDGER_DSN* ]] || {
    echo "idemledger-$binary: expected exit 2 naming IDEMLEDGER_DSN, got $rc: $out" >&2
    exit 1
  }
done
# The installed units, with their manual pages now in place: not a word from verify.
out=$(systemd-analyze verify /usr/lib/systemd/system/idemledger-*.service 2>&1) && [[ -z $out ]] || {
  echo "systemd-analyze verify on the installed units: $out" >&2
  exit 1
}
echo "installed binaries and units: ok"

section "consumers of the installed packages, on a private PostgreSQL"
cp -r tests/packaging/installed_consumer "$work/cmake" && cp -r tests/packaging/installed_consumer "$work/make"
cmake -S "$work/cmake" -B "$work/cmake/build" -G Ninja >/dev/null
cmake --build "$work/cmake/build"
make -s -C "$work/make" consumer
echo "pkg-config --libs idemledger: $(pkg-config --libs idemledger)"
bash scripts/with-postgres.sh "$work/pg" bash -c \
  "'$work/cmake/build/consumer' && '$work/make/consumer'"
echo "package: ${#debs[@]} packages built, lintian clean, installed, two consumers ran"

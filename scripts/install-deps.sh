#!/usr/bin/env bash
# Installs the Debian 12 packages idemledger needs (plus any named as
# arguments, e.g. clang for the fuzzers), and only those missing.
set -euo pipefail
packages=(cmake ninja-build g++ pkg-config git
  libpq-dev libabsl-dev libfmt-dev libboost-dev libssl-dev nlohmann-json3-dev prometheus-cpp-dev
  libgtest-dev libgmock-dev libbenchmark-dev libcpp-httplib-dev libyaml-cpp-dev
  postgresql-15 postgresql-client-15 pgbouncer postgresql-15-auto-failover
  openssl systemd man-db prometheus iproute2 "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  [[ $(id -u) -eq 0 ]] || { echo "install-deps: run as root to install: ${missing[*]}" >&2; exit 1; }
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

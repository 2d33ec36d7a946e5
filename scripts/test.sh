#!/usr/bin/env bash
# test.sh — README command 2: build, start a private PostgreSQL, run every test.
#   IDEMLEDGER_BUILD_DIR (default build) picks the tree; extra args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${IDEMLEDGER_BUILD_DIR:-build}
bash scripts/build.sh "$build_dir" "$@"
# Tests need durability semantics, not durability: skip fsync for speed.
IDEMLEDGER_PG_OPTS="${IDEMLEDGER_PG_OPTS:--c fsync=off -c synchronous_commit=off}" \
  bash scripts/with-postgres.sh "$build_dir" ctest --test-dir "$build_dir" --output-on-failure -j2

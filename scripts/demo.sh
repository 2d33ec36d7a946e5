#!/usr/bin/env bash
# demo.sh — README command 1: build, start a private PostgreSQL, run the quickstart.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh build
bash scripts/with-postgres.sh build build/examples/quickstart/quickstart "$@"

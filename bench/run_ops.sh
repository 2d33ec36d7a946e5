#!/usr/bin/env bash
# run_ops.sh [EVENTS=1000000] [CLIENTS=2] [SECONDS=10]
# The operations jobs at scale on a private server (bench/ops_load.cpp):
# full reconciliation time and peak memory; cleanup time and the ledger's
# throughput while it runs, next to its throughput alone in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh build
exec bash scripts/with-postgres.sh build/ops-pg build/bench/ops_load --events "${1:-1000000}" \
  --clients "${2:-2}" --seconds "${3:-10}"

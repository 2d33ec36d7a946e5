#!/usr/bin/env bash
# run_ops.sh [EVENTS=1000000] [CLIENTS=2] [SECONDS=10]
# The operations jobs at scale on a private server (bench/ops_load.cpp):
# full reconciliation time and peak memory; cleanup time and the ledger's
# throughput while it runs, next to its throughput alone in the same run —
# on the plain layout, then again on monthly partitions (cleanup drops whole
# expired months there), same server.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh build
args=(--events "${1:-1000000}" --clients "${2:-2}" --seconds "${3:-10}")
exec bash scripts/with-postgres.sh build/ops-pg bash -c \
  'build/bench/ops_load "$@" && build/bench/ops_load "$@" --partitioned 1' ops "${args[@]}"

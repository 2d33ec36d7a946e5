#!/usr/bin/env bash
# run_relay.sh [MESSAGES=20000] [IN_FLIGHT=16] [DLQ=10000] [MOCK_DELAY_MS=0]
# The delivery relay against mock_downstream on a private server
# (bench/relay_load.cpp): deliveries/s at 0% and 20% failures next to the API
# alone with as many HTTP clients, and the drain time of a DLQ.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh build
messages=${1:-20000} in_flight=${2:-16} dlq=${3:-10000} delay=${4:-0}
exec bash scripts/with-postgres.sh build/relay-pg bash -c '
  set -euo pipefail
  source scripts/loopback.sh
  log=build/relay-pg/mock.log
  MOCK_DELAY_MS='"$delay"' build/examples/mock_downstream/mock_downstream >"$log" 2>&1 &
  mock=$!
  trap "kill $mock 2>/dev/null || true" EXIT
  port=$(logged_port "$log" listening)
  build/bench/relay_load --url "http://127.0.0.1:$port/notify" --messages '"$messages"' \
    --in-flight '"$in_flight"' --dlq '"$dlq"

#!/usr/bin/env bash
# demo-services.sh — run by demo.sh inside with-postgres.sh: starts the
# services, runs the provider, stops the services (SIGTERM) whatever happens.
set -euo pipefail
bin=build/examples
logs=build/demo-logs
rm -rf "$logs" && mkdir -p "$logs"

export IDEMLEDGER_DSN="$IDEMLEDGER_TEST_DSN" IDEMLEDGER_SCHEMA=demo
IDEMLEDGER_WEBHOOK_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export IDEMLEDGER_WEBHOOK_SECRET IDEMLEDGER_TIMESTAMP_TOLERANCE_S=300
"$bin/provider_simulator/provider_simulator" setup

pids=()
stop_services() {
  kill -TERM "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
}
trap stop_services EXIT

IDEMLEDGER_LISTEN_PORT=0 IDEMLEDGER_RATE_LIMIT_RPS=100000 "$bin/webhook_intake/webhook_intake" >"$logs/intake.log" 2>&1 &
pids+=($!)
for w in 1 2; do
  IDEMLEDGER_WORKER_THREADS=2 IDEMLEDGER_RETRY_BASE_MS=50 IDEMLEDGER_DLQ_SPOOL="$logs/worker$w.spool" \
    "$bin/outbox_worker/outbox_worker" >"$logs/worker$w.log" 2>&1 &
  pids+=($!)
done

port=""
for _ in $(seq 1 100); do
  port=$(sed -n 's/.*"msg":"listening".*"port":\([0-9]*\).*/\1/p; s/.*"port":\([0-9]*\).*"msg":"listening".*/\1/p' "$logs/intake.log" | head -n 1)
  [[ -n "$port" ]] && break
  sleep 0.1
done
[[ -n "$port" ]] || { echo "webhook_intake did not start:" >&2; cat "$logs/intake.log" >&2; exit 1; }
echo "demo: webhook_intake on 127.0.0.1:$port, 2 outbox_worker processes; logs in $logs/"

IDEMLEDGER_INTAKE_PORT=$port "$bin/provider_simulator/provider_simulator" run

# What on-call sees afterwards: the full reconciliation and the queue's status.
echo
build/tools/idemledger-admin/idemledger-admin reconcile --full
build/tools/idemledger-admin/idemledger-admin status

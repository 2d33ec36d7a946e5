#!/usr/bin/env bash
# demo-services.sh — run by demo.sh inside with-postgres.sh: starts the
# services, runs the provider, stops the services (SIGTERM) whatever happens.
# DEMO_RELAYS=0 (bench/run_load.sh) leaves out the notifications, their
# relays, the mock API and its outage: intake and the workers alone.
# DEMO_SESSION_CPU and DEMO_MACHINE_STAT: below.
set -euo pipefail
relays=${DEMO_RELAYS:-2}
[[ "$relays" =~ ^[0-8]$ ]] || { echo "DEMO_RELAYS must be 0..8, got '$relays'" >&2; exit 2; }
bin=build/examples
logs=build/demo-logs
rm -rf "$logs" && mkdir -p "$logs"

# Every service's session names built-ins under pg_catalog alone, as a
# deployment's role should (docs/deploy.md, "The database role"): all the SQL
# they send qualifies the schema's objects, and the demo proves it.
export IDEMLEDGER_DSN="$IDEMLEDGER_TEST_DSN options='-c search_path=pg_catalog,pg_temp'"
export IDEMLEDGER_SCHEMA=demo
IDEMLEDGER_WEBHOOK_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
IDEMLEDGER_DLQ_SPOOL_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export IDEMLEDGER_WEBHOOK_SECRET IDEMLEDGER_TIMESTAMP_TOLERANCE_S=300 IDEMLEDGER_DLQ_SPOOL_KEY
"$bin/provider_simulator/provider_simulator" setup

# Whatever happens, nothing this script started outlives it.
stop_services() {
  # shellcheck disable=SC2046  # one process id a word
  kill -TERM $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
}
trap stop_services EXIT

IDEMLEDGER_LISTEN_PORT=0 IDEMLEDGER_RATE_LIMIT_RPS=100000 "$bin/webhook_intake/webhook_intake" >"$logs/intake.log" 2>&1 &
services=(webhook_intake $!)  # NAME PID pairs, stopped and checked at the end
# Each worker with its default threads (one claiming, one spare; the caller's
# IDEMLEDGER_WORKER_THREADS and IDEMLEDGER_SPARE_AFTER_MS override them, as
# bench/run_load.sh does).
for w in 1 2; do
  IDEMLEDGER_RETRY_BASE_MS=50 IDEMLEDGER_DLQ_SPOOL="$logs/worker$w.spool" \
    IDEMLEDGER_METRICS_PORT=0 IDEMLEDGER_WRITE_NOTIFICATIONS=$((relays > 0)) \
    "$bin/outbox_worker/outbox_worker" >"$logs/worker$w.log" 2>&1 &
  services+=("outbox_worker $w" $!)
done
# shellcheck source=scripts/loopback.sh
source scripts/loopback.sh
port=$(logged_port "$logs/intake.log" listening)
admin_port=$(logged_port "$logs/intake.log" "admin listening")
metrics_ports=("$(logged_port "$logs/worker1.log" "metrics listening")" "$(logged_port "$logs/worker2.log" "metrics listening")")
echo "demo: webhook_intake on 127.0.0.1:$port, 2 outbox_worker processes (/metrics on ${metrics_ports[*]}),"
if ((relays > 0)); then
  # The notifications those workers write go to an external API (the mock),
  # through the relay replicas.
  MOCK_DELAY_MS=2 "$bin/mock_downstream/mock_downstream" >"$logs/mock.log" 2>&1 &
  services+=(mock_downstream $!)
  mock_port=$(logged_port "$logs/mock.log" listening)
  relay_in_flight=8
  for r in $(seq "$relays"); do
    RELAY_URL="http://127.0.0.1:$mock_port/notify" RELAY_MAX_IN_FLIGHT=$relay_in_flight \
      RELAY_TIMEOUT_MS=500 RELAY_ATTEMPTS=2 RELAY_MARKER_TTL_MS=2000 RELAY_DLQ_BACKOFF_MS=500 \
      "$bin/notification_relay/notification_relay" >"$logs/relay$r.log" 2>&1 &
    services+=("notification_relay $r" $!)
  done
  mock_control() { loopback_http POST "$mock_port" "/control?mode=$1" >/dev/null; }
  # The outage in the middle of the run: the API hangs for 3 s, then fails for 3 s.
  (sleep 3 && mock_control timeout && sleep 3 && mock_control fail && sleep 3 && mock_control ok) &
  outage=$!
  echo "      $relays notification_relay processes -> mock_downstream on 127.0.0.1:$mock_port; logs in $logs/"
fi

# DEMO_MACHINE_STAT=FILE (bench/run_load.sh): the whole machine's "cpu" line of
# /proc/stat every 0.2 s from the provider's start until the services stop,
# each with the time it was read as its last field, in seconds since the
# epoch (its remainder of a day is the UTC time of day the logs give).
if [[ -n "${DEMO_MACHINE_STAT:-}" ]]; then
  while :; do
    echo "$(head -n 1 /proc/stat) $(date +%s.%N)"
    sleep 0.2
  done >"$DEMO_MACHINE_STAT" &
fi
IDEMLEDGER_INTAKE_PORT=$port "$bin/provider_simulator/provider_simulator" run
# DEMO_SESSION_CPU=FILE (bench/run_load.sh): the server's CPU so far in each
# service's sessions, by application_name, and the time they waited for a
# core (the scheduler's run-queue delay, /proc/PID/schedstat; -1 where the
# kernel keeps none): "NAME CPU_MS WAIT_MS" lines, read from /proc while the
# sessions are still open; then "process:webhook_intake CPU_MS WAIT_MS", all
# of intake's threads.
if [[ -n "${DEMO_SESSION_CPU:-}" ]]; then
  hz=$(getconf CLK_TCK)
  # CPU from stat (ticks), the run-queue delay from schedstat (ns).
  cpu_and_wait() {
    local label=$1 pid=$2 task
    for task in "/proc/$pid/task"/*; do
      awk -v n="$label" -v w="$(awk '{print $2}' "$task/schedstat" 2>/dev/null || echo -1)" \
        '{print n, $14 + $15, w}' "$task/stat" 2>/dev/null || true
    done
  }
  {
    psql "$IDEMLEDGER_DSN" -X -q -t -A -F ' ' -c "SELECT pid, application_name FROM pg_stat_activity
        WHERE application_name IN ('webhook_intake', 'outbox_worker', 'notification_relay')" |
      while read -r pid name; do cpu_and_wait "$name" "$pid"; done
    cpu_and_wait process:webhook_intake "${services[1]}"
  } | awk -v hz="$hz" '{t[$1] += $2; w[$1] = (w[$1] < 0 || $3 < 0) ? -1 : w[$1] + $3}
      END {for (n in t) printf "%s %d %d\n", n, t[n] * 1000 / hz, w[n] < 0 ? -1 : w[n] / 1e6}' \
    >"$DEMO_SESSION_CPU"
fi
if ((relays > 0)); then
  wait "$outage"
  MOCK_PORT=$mock_port RELAY_BOUND=$((relays * relay_in_flight)) \
    "$bin/provider_simulator/provider_simulator" relay-check
  echo "relay 1 of $relays, its mode through the outage:"
  grep '"relay mode changed"' "$logs/relay1.log" | sed -E 's/.*"ts":"([^"]*)".*"from":"([a-z]*)","to":"([a-z]*)".*/  \1  \2 -> \3/'
fi

# What on-call sees afterwards: the full reconciliation and the queue's status.
echo
build/tools/idemledger-admin/idemledger-admin reconcile --full
build/tools/idemledger-admin/idemledger-admin status
echo
echo "what the ledger owes users, per asset (compare with the custody wallets):"
build/tools/idemledger-admin/idemledger-admin liabilities
if ((relays > 0)); then
  echo
  build/tools/idemledger-admin/idemledger-admin relay status
fi

# And what a Prometheus server scrapes (full text in $logs/*.prom).
loopback_http GET "$admin_port" /metrics >"$logs/intake.prom"
for i in 0 1; do loopback_http GET "${metrics_ports[$i]}" /metrics >"$logs/worker$((i + 1)).prom"; done
echo
echo "metrics excerpt (webhook_intake, then worker 1 of 2):"
grep -E '^idemledger_webhook_requests_total' "$logs/intake.prom"
grep -E '^idemledger_(ledger_outcomes_total|asset_outcomes_total|holds_expired_total|retries_scheduled_total|dead_lettered_total|recovered_total|time_to_confirm_seconds_(count|sum)|time_to_confirm_seconds_bucket\{le="0\.(01|05|1)"\}|apply_duration_seconds_bucket\{le="0\.001"\}|apply_duration_seconds_count|queue_events|dead_letters_open|last_reconciliation_timestamp_seconds)' "$logs/worker1.prom"
# Both expositions as Prometheus's own linter reads them.
for f in intake worker1 worker2; do
  if ! lint=$(promtool check metrics <"$logs/$f.prom" 2>&1); then
    echo "demo: promtool check metrics finds problems in $f's /metrics:" >&2
    echo "$lint" >&2
    exit 1
  fi
done
echo "promtool check metrics: webhook_intake's and both workers' /metrics are clean"

# The services stop as an operator stops them, SIGTERM: each must exit 0
# within 30 s. A crash or a hang on the way out fails the demo.
stop_cleanly "${services[@]}"
if ((${#stop_failures[@]} > 0)); then
  echo "demo: services not stopped cleanly by SIGTERM:" >&2
  printf '  %s\n' "${stop_failures[@]}" >&2
  exit 1
fi
echo "every service stopped cleanly on SIGTERM (exit 0): $((${#services[@]} / 2)) processes"

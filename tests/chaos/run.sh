#!/usr/bin/env bash
# tests/chaos/run.sh [EVENTS=10000] [CHAOS_SECONDS=60] [RESTARTS=3] [FAILOVERS=0] [PARTITIONS=0]
#
# The soak: on a private PostgreSQL (fsync and synchronous commit ON — a crash
# must not lose an acknowledged commit), webhook_intake + 4 outbox_worker
# processes + the provider simulator delivering every event 1-3 times, and 2
# notification_relay processes delivering the workers' notifications to
# mock_downstream, while a chaos driver (loopback only, bounded in time and
# count) keeps doing all of:
#   - SIGKILL a random worker every ~2 s, and start a new one;
#   - freeze a random worker (SIGSTOP) for 5 s every ~9 s, as a paused host:
#     a claim-and-apply it froze inside is ended by the server after the
#     workers' idle limit (1.5 s here) and its events go to other workers;
#     leases it holds expire (3 s); thawed, it must double nothing;
#   - SIGKILL a random relay every ~7 s, and start a new one;
#   - freeze a random relay for 15 s every ~30 s, past its 13-s lease: the
#     other relay takes its messages over, and thawed, it sends none of them;
#   - SIGKILL webhook_intake every ~10 s, group commits in flight, and check,
#     while it is down, that every event id the provider got a 200 for is in
#     payment_events (a 200 is sent only after the commit); then start it again
#     on the same port;
#   - take the downstream API down (503) for 3 s every ~20 s;
#   - pg_terminate_backend a random worker or relay connection every ~3 s;
#   - restart the database RESTARTS times (the second with `stop -m immediate`,
#     a crash: committed work must survive, in-flight work must be retried);
#   - hold row locks on hot users for 2 s every ~5 s (NOWAIT and lock_timeout).
# With FAILOVERS > 0 it runs on a replicated cluster instead (scripts/cluster.sh:
# a primary, a synchronous standby, pg_auto_failover), every service on the
# cluster's DSN (both nodes, target_session_attrs=read-write), and the
# database "restarts" become FAILOVERS failovers: the primary's machine dies
# (its keeper and postgres SIGKILLed), the monitor promotes the standby, the
# old primary rejoins as the standby (pg_rewind), and the next failover waits
# until it has. Each failover's seconds without writes (a client's view) are
# printed.
# With PARTITIONS > 0 (a single server) it runs in a network namespace of its
# own (root, as in CI), the services reach the database over TCP on an address
# of that namespace's loopback, and PARTITIONS times the address goes away for
# 12 s: every packet to the database is dropped, no reset, as when its
# machine's network splits off. Sessions in flight stall (the libpq adapter
# ends a call after 10 s of silence), new connects find no route, and
# everything must recover once the address is back.
# Then it waits until every event is terminal and checks with its own SQL:
# no double credit, no lost event, no negative balance, every account
# reconciles (balance and held), every asset sums to zero, every hold ended
# once and as its withdrawal did, every non-business failure dead-lettered,
# one outbox row per outcome and per hold step;
# then that every notification reached the API (by its own count), none was
# dropped, and any received twice is explained by a 2xx the relay never saw
# (the API acted on a request after the relay's deadline) or by a mark lost
# after the API's 2xx (relay or session killed, database restarting); the
# Idempotency-Key lets the API tell.
# Then it stops every process with SIGTERM: each must exit 0 within 30 s (a
# sanitizer build's LeakSanitizer report at exit fails it too).
# Prints the figures; exits non-zero on any violation. A service, the mock API
# or the provider that ends without being killed (a crash) stops the soak at
# once, with the end of its log.
set -euo pipefail
cd "$(dirname "$0")/../.."
events=${1:-10000} chaos_s=${2:-60} restarts=${3:-3} failovers=${4:-0} partitions=${5:-0}

# IDEMLEDGER_BUILD_DIR: a tree already built (ctest's failover.* test);
# otherwise build/ is built first.
build=${IDEMLEDGER_BUILD_DIR:-build}
db_host=10.77.0.1  # with PARTITIONS: the database's address, on the namespace's loopback
if ((partitions > 0)) && [[ -z "${IDEMLEDGER_OUTER_NETNS:-}" ]]; then
  ((failovers == 0)) || { echo "chaos soak: PARTITIONS need FAILOVERS=0" >&2; exit 2; }
  [[ -n "${IDEMLEDGER_BUILD_DIR:-}" ]] || bash scripts/build.sh build >/dev/null
  export IDEMLEDGER_BUILD_DIR=$build IDEMLEDGER_NETNS_ADDRESS=$db_host
  # Every address of the namespace (its loopback's only): a server restarted
  # while cut off could not bind $db_host itself, and would never hear from
  # the services again once it is back.
  export IDEMLEDGER_PG_OPTS="${IDEMLEDGER_PG_OPTS:-} -c listen_addresses=*"
  exec bash tests/pg/in_private_network.sh "$build/chaos-pg" bash "$0" "$events" "$chaos_s" "$restarts" 0 "$partitions"
elif ((failovers > 0)) && [[ -z "${IDEMLEDGER_CLUSTER_DIR:-}" ]]; then
  [[ -n "${IDEMLEDGER_BUILD_DIR:-}" ]] || bash scripts/build.sh build >/dev/null
  exec bash scripts/with-cluster.sh "$build/chaos-cluster" bash "$0" "$events" "$chaos_s" 0 "$failovers"
elif ((failovers == 0)) && [[ -z "${IDEMLEDGER_PG_PORT:-}" ]]; then
  [[ -n "${IDEMLEDGER_BUILD_DIR:-}" ]] || bash scripts/build.sh build >/dev/null
  exec bash scripts/with-postgres.sh "$build/chaos-pg" bash "$0" "$events" "$chaos_s" "$restarts"
fi

bin=$build/examples
logs=$build/chaos-logs
((failovers == 0)) || logs=$build/chaos-logs-failover
rm -rf "$logs" && mkdir -p "$logs"
schema=chaos
psql=(psql -X -q -t -A -v ON_ERROR_STOP=1 -d "$IDEMLEDGER_TEST_DSN")
sql() { "${psql[@]}" -c "$1"; }
# shellcheck disable=SC2206  # IDEMLEDGER_PG_AS is "runuser -u postgres --" or empty
as_owner=(${IDEMLEDGER_PG_AS:-})
pg_stop() { "${as_owner[@]}" "$IDEMLEDGER_PG_BIN/pg_ctl" -D "$IDEMLEDGER_PG_DATA" -w -t 60 stop -m "$1" >/dev/null; }
pg_start() {
  "${as_owner[@]}" "$IDEMLEDGER_PG_BIN/pg_ctl" -D "$IDEMLEDGER_PG_DATA" -w -t 60 start \
    -l "$IDEMLEDGER_PG_DATA/../server.log" \
    -o "-p $IDEMLEDGER_PG_PORT -k $IDEMLEDGER_PG_SOCKET -c listen_addresses=127.0.0.1 -c max_connections=200 $IDEMLEDGER_PG_OPTS" \
    >/dev/null
}

export IDEMLEDGER_SCHEMA=$schema
IDEMLEDGER_WEBHOOK_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
IDEMLEDGER_DLQ_SPOOL_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export IDEMLEDGER_WEBHOOK_SECRET IDEMLEDGER_DLQ_SPOOL_KEY
export IDEMLEDGER_DSN="$IDEMLEDGER_TEST_DSN"  # the provider's and the checks' (a unix socket)
# The services' sessions: over TCP to an address that can go away, with PARTITIONS.
service_dsn=$IDEMLEDGER_TEST_DSN
if ((partitions > 0)); then
  echo "host all all $db_host/32 trust" >>"$IDEMLEDGER_PG_DATA/pg_hba.conf"
  "${as_owner[@]}" "$IDEMLEDGER_PG_BIN/pg_ctl" -D "$IDEMLEDGER_PG_DATA" reload >/dev/null
  service_dsn="host=$db_host port=$IDEMLEDGER_PG_PORT dbname=postgres user=postgres"
  for _ in $(seq 1 50); do psql -X -q -d "$service_dsn" -c "SELECT 1" >/dev/null 2>&1 && break; sleep 0.2; done
fi
started=$(date +%s)
# What was done when, for the timeline chart: one file per kind, one time a line.
marks=(worker_kill worker_freeze relay_kill relay_freeze intake_kill api_outage db_restart db_crash db_failover db_partition)
for m in "${marks[@]}"; do : >"$logs/marks_$m.tsv"; done
mark() { date +%s.%N >>"$logs/marks_$1.tsv"; }
"$bin/provider_simulator/provider_simulator" setup >/dev/null

declare -A worker_pid relay_pid
intake_pid=""
# Whatever happens, nothing this script started outlives it.
cleanup() {
  # shellcheck disable=SC2046  # one process id a word
  kill -TERM $(jobs -p) 2>/dev/null || true
  wait 2>/dev/null || true
}
trap cleanup EXIT
# The processes the soak keeps running, as NAME PID LOG triples in `running`:
# what it watches for crashes and stops at the end.
list_running() {
  running=(intake "$intake_pid" "$intake_log" mock_downstream "$mock_pid" "$logs/mock.log")
  local i
  for i in "${!worker_pid[@]}"; do running+=("worker $i" "${worker_pid[$i]}" "$logs/worker$i.log"); done
  for i in "${!relay_pid[@]}"; do running+=("relay $i" "${relay_pid[$i]}" "$logs/relay$i.log"); done
}

# Intake group-commits (its default): a kill lands on batches in flight.
start_intake() {  # PORT LOG
  IDEMLEDGER_DSN=$service_dsn IDEMLEDGER_LISTEN_PORT=$1 IDEMLEDGER_RATE_LIMIT_RPS=100000 \
    "$bin/webhook_intake/webhook_intake" >"$2" 2>&1 &
  intake_pid=$! intake_log=$2
}
start_intake 0 "$logs/intake.log"
start_worker() {
  IDEMLEDGER_DSN="$service_dsn application_name=chaos_worker" IDEMLEDGER_WORKER_THREADS=2 \
    IDEMLEDGER_LEASE_MS=3000 IDEMLEDGER_RETRY_BASE_MS=200 IDEMLEDGER_POLL_MS=200 \
    IDEMLEDGER_IDLE_IN_TRANSACTION_MS=1500 \
    IDEMLEDGER_WRITE_NOTIFICATIONS=1 IDEMLEDGER_DLQ_SPOOL="$logs/worker$1.spool" \
    "$bin/outbox_worker/outbox_worker" >>"$logs/worker$1.log" 2>&1 &
  worker_pid[$1]=$!
}
for w in 1 2 3 4; do start_worker "$w"; done

# shellcheck source=scripts/loopback.sh
source scripts/loopback.sh
port=$(logged_port "$logs/intake.log" listening)
acks=$logs/acked.txt
: >"$acks"
# With intake dead nothing records events: every id acknowledged so far must
# be in the table now. Prints how many are not.
acked_not_recorded() {
  { echo "CREATE TEMP TABLE acked (id text); COPY acked FROM STDIN;"
    sort -u "$1"
    printf '%s\n' '\.' "SELECT count(*) FROM acked a WHERE NOT EXISTS
      (SELECT 1 FROM $schema.payment_events e WHERE e.event_id = a.id);"
  } | "${psql[@]}" -f - | tr -d ' '
}

MOCK_DELAY_MS=1 "$bin/mock_downstream/mock_downstream" >"$logs/mock.log" 2>&1 &
mock_pid=$!
mock_port=$(logged_port "$logs/mock.log" listening)
relay_in_flight=4
start_relay() {
  IDEMLEDGER_DSN="$service_dsn application_name=chaos_relay" \
    RELAY_URL="http://127.0.0.1:$mock_port/notify" RELAY_MAX_IN_FLIGHT=$relay_in_flight \
    RELAY_TIMEOUT_MS=500 RELAY_ATTEMPTS=2 RELAY_MARKER_TTL_MS=1000 RELAY_DLQ_BACKOFF_MS=500 \
    RELAY_MAX_RETRIES=50 RELAY_POLL_MS=50 \
    "$bin/notification_relay/notification_relay" >>"$logs/relay$1.log" 2>&1 &
  relay_pid[$1]=$!
}
for r in 1 2; do start_relay "$r"; done
mock_http() { loopback_http "$1" "$mock_port" "$2"; }

echo "chaos: $events events against webhook_intake :$port, 4 workers, 2 relays -> mock :$mock_port; chaos for ${chaos_s}s (logs: $logs/)"
# Deliveries paced to span the chaos window (~2.2 per event incl. bad ones in
# round one, ~0.6 more in round two: the withdrawals' confirmations and failures).
SIM_CHAOS=1 SIM_ACK_LOG="$acks" SIM_EVENTS=$events SIM_WAIT_S=600 SIM_CONCURRENCY=8 IDEMLEDGER_INTAKE_PORT=$port \
  SIM_DELIVERIES_PER_S=$((events * 28 / 10 / chaos_s + 1)) \
  "$bin/provider_simulator/provider_simulator" run >"$logs/provider.log" 2>&1 &
provider=$!

# A process that ends without being killed has crashed (no service exits
# before its SIGTERM), and the next kill would hide it behind a restart: the
# soak stops at once, with the end of its log, instead of running on (or
# waiting out the provider's SIM_WAIT_S) to fail later for a reason that
# points elsewhere.
fail_if_ended() {  # NAME PID LOG [ANY]: with ANY, an exit status 0 is a crash too
  kill -0 "$2" 2>/dev/null && return 0
  local status=0
  wait "$2" 2>/dev/null || status=$?
  ((status == 0)) && [[ -z "${4:-}" ]] && return 0
  echo "chaos soak: VIOLATION: $1 (pid $2) ended on its own, exit status $status," \
    "$(($(date +%s) - started)) s in; the end of $3:"
  tail -n 40 "$3"
  exit 1
}
# Every process the soak needs, checked each tick; the provider counts only
# while the soak is not waiting for it (its end is its verdict, read below).
fail_if_any_ended() {  # [provider]
  list_running
  local i
  for ((i = 0; i < ${#running[@]}; i += 3)); do
    fail_if_ended "${running[i]}" "${running[i + 1]}" "${running[i + 2]}" any
  done
  [[ -z "${1:-}" ]] || fail_if_ended provider_simulator "$provider" "$logs/provider.log"
}
# SIGKILL NAME's PID after checking that it still ran (else it crashed).
chaos_kill() {  # NAME PID LOG MARK
  fail_if_ended "$1" "$2" "$3" any
  kill -KILL "$2" 2>/dev/null || fail_if_ended "$1" "$2" "$3" any
  wait "$2" 2>/dev/null || true
  mark "$4"
}
# SIGSTOP NAME's PID (after checking that it still ran) for SECONDS, then
# SIGCONT: a paused host, back with whatever it held.
chaos_freeze() {  # NAME PID LOG MARK SECONDS
  fail_if_ended "$1" "$2" "$3" any
  kill -STOP "$2"
  mark "$4"
  (sleep "$5" && kill -CONT "$2" 2>/dev/null) &
}

kills=0 freezes=0 relay_kills=0 relay_freezes=0 intake_kills=0 acks_checked=0 acked_missing=0 api_outages=0 conn_kills=0 db_restarts=0 lock_holds=0
failovers_done=0 failover_seconds=() partitions_done=0
tick=0
chaos_end=$(($(date +%s) + chaos_s))
while (($(date +%s) < chaos_end)); do
  sleep 0.5
  tick=$((tick + 1))
  fail_if_any_ended provider
  if ((tick % 4 == 0)); then  # ~2 s: SIGKILL a worker mid-whatever, start a new one
    w=$((RANDOM % 4 + 1))
    chaos_kill "worker $w" "${worker_pid[$w]}" "$logs/worker$w.log" worker_kill
    kills=$((kills + 1))
    start_worker "$w"
  fi
  if ((tick % 18 == 11)); then  # ~9 s: freeze a worker for 5 s (a kill meanwhile ends it as well)
    w=$((RANDOM % 4 + 1))
    chaos_freeze "worker $w" "${worker_pid[$w]}" "$logs/worker$w.log" worker_freeze 5
    freezes=$((freezes + 1))
  fi
  if ((tick % 60 == 40)); then  # ~30 s: freeze a relay for 15 s, past its lease
    r=$((RANDOM % 2 + 1))
    chaos_freeze "relay $r" "${relay_pid[$r]}" "$logs/relay$r.log" relay_freeze 15
    relay_freezes=$((relay_freezes + 1))
  fi
  if ((tick % 14 == 7)); then  # ~7 s: SIGKILL a relay, deliveries in flight, start a new one
    r=$((RANDOM % 2 + 1))
    chaos_kill "relay $r" "${relay_pid[$r]}" "$logs/relay$r.log" relay_kill
    relay_kills=$((relay_kills + 1))
    start_relay "$r"
  fi
  if ((tick % 20 == 13)); then  # ~10 s: SIGKILL intake; what it acknowledged must be there
    chaos_kill intake "$intake_pid" "$intake_log" intake_kill
    intake_kills=$((intake_kills + 1))
    cp "$acks" "$logs/acked_at_kill.txt"
    if n=$(acked_not_recorded "$logs/acked_at_kill.txt" 2>>"$logs/ack_check.log"); then
      acked_missing=$((acked_missing + n))
      acks_checked=$(sort -u "$logs/acked_at_kill.txt" | wc -l)
    else
      echo "ack check skipped: the database is restarting" >>"$logs/ack_check.log"
    fi
    start_intake "$port" "$logs/intake$intake_kills.log"
    logged_port "$logs/intake$intake_kills.log" listening >/dev/null
  fi
  if ((tick % 40 == 20)); then  # ~20 s: the API answers 503 for 3 s
    mock_http POST "/control?mode=fail" >/dev/null
    mark api_outage
    (sleep 3 && mock_http POST "/control?mode=ok" >/dev/null) &
    api_outages=$((api_outages + 1))
  fi
  if ((tick % 6 == 3)); then  # ~3 s: the server kills one of their sessions
    n=$(sql "SELECT count(pg_terminate_backend(pid)) FROM (SELECT pid FROM pg_stat_activity
              WHERE application_name IN ('chaos_worker', 'chaos_relay') ORDER BY random() LIMIT 1) s" 2>/dev/null || echo 0)
    conn_kills=$((conn_kills + ${n:-0}))
  fi
  if ((tick % 10 == 5)); then  # ~5 s: hot users locked for 2 s
    "${psql[@]}" -c "BEGIN; SELECT count(*) FROM $schema.accounts WHERE user_id <= 5 FOR UPDATE; SELECT pg_sleep(2); COMMIT;" \
      >/dev/null 2>&1 &
    lock_holds=$((lock_holds + 1))
  fi
  # Restarts spread over the chaos window; the second one is a crash.
  if ((db_restarts < restarts && $(date +%s) >= chaos_end - chaos_s + (db_restarts + 1) * chaos_s / (restarts + 1))); then
    if ((db_restarts == 1)); then mark db_crash; pg_stop immediate; else mark db_restart; pg_stop fast; fi
    sleep 1
    pg_start
    db_restarts=$((db_restarts + 1))
  fi
  # Partitions at 1, 3, 5... (2 x PARTITIONS + 2)ths of the chaos window: the
  # database's address goes away for 12 s (its packets dropped), then comes
  # back, while the rest of the chaos goes on. One may fall on a restart: a
  # server restarting while cut off is one more case.
  if ((partitions_done < partitions && $(date +%s) >= chaos_end - chaos_s + (2 * partitions_done + 1) * chaos_s / (2 * partitions + 2))); then
    mark db_partition
    (ip addr del "$db_host/32" dev lo && sleep 12 && ip addr add "$db_host/32" dev lo) &
    partitions_done=$((partitions_done + 1))
  fi
  # Failovers spread over the chaos window; each waits for the cluster to
  # have its standby back (synchronous again) before the primary dies.
  if ((failovers_done < failovers && $(date +%s) >= chaos_end - chaos_s + (failovers_done + 1) * chaos_s / (failovers + 1))) &&
    bash scripts/cluster.sh wait-healthy "$IDEMLEDGER_CLUSTER_DIR" 1 2>/dev/null; then
    mark db_failover
    failover_seconds+=("$(bash scripts/cluster.sh failover "$IDEMLEDGER_CLUSTER_DIR")")
    failovers_done=$((failovers_done + 1))
  fi
done
for p in "${worker_pid[@]}" "${relay_pid[@]}"; do kill -CONT "$p" 2>/dev/null || true; done  # a freeze still on
echo "chaos: stopped after ${chaos_s}s ($kills worker kills, $freezes worker freezes, $relay_kills relay kills, $relay_freezes relay freezes, $intake_kills intake kills, $api_outages API outages, $conn_kills connection kills, $db_restarts restarts, $failovers_done failovers, $partitions_done partitions, $lock_holds lock holds); waiting for the provider"

# The provider ends once every event is final (or after SIM_WAIT_S); the
# services it waits for are still watched meanwhile.
while kill -0 "$provider" 2>/dev/null; do
  fail_if_any_ended
  sleep 0.5
done
set +e
wait "$provider"
provider_status=$?
set -e
sed -n '/^provider: round one/,$p' "$logs/provider.log"

# The relays finish what the workers wrote (the last outage is over by now).
mock_http POST "/control?mode=ok" >/dev/null
unsettled_sql="SELECT (SELECT count(*) FROM $schema.outbox WHERE published_at IS NULL AND diverted_at IS NULL)
   + (SELECT count(*) FROM $schema.relay_dead_letters WHERE resolution IS NULL)"
for _ in $(seq 1 600); do
  [[ $(sql "$unsettled_sql" | tr -d ' ') == 0 ]] && break
  fail_if_any_ended
  sleep 0.2
done

# Independent checks, our own SQL (not the library's, not the simulator's).
q() { sql "$1" | tr -d ' '; }
events_recorded=$(q "SELECT count(*) FROM $schema.payment_events")
# Sent: round one's events, and round two's confirmations and failures.
round_two=$(sed -n 's/^provider: round two: \([0-9]*\) confirmations ([0-9]* in part), \([0-9]*\) failures, \([0-9]*\) confirmations of expired.*/\1 + \2 + \3/p' "$logs/provider.log")
events_sent=$((events + ${round_two:-0}))  # no round two: the provider failed, and says so below
not_final=$(q "SELECT count(*) FROM $schema.payment_events WHERE status NOT IN ('confirmed','failed')")
confirmed=$(q "SELECT count(*) FROM $schema.payment_events WHERE status = 'confirmed'")
# The idempotency key, spelled in SQL: SHA-256 over length-prefixed fields.
key="encode(sha256(int4send(octet_length(e.event_id)) || convert_to(e.event_id, 'UTF8')
      || int4send(octet_length(e.event_type)) || convert_to(e.event_type, 'UTF8')), 'hex')"
insufficient=$(q "SELECT count(*) FROM $schema.payment_events e JOIN $schema.processed_events p
   ON p.idempotency_key = $key WHERE e.status = 'failed' AND p.outcome = 'insufficient_funds'")
rejected=$(q "SELECT count(*) FROM $schema.holds WHERE state = 'rejected'")
holds=$(sql "SELECT coalesce(string_agg(state || ' ' || n, ', '), 'none') FROM (
   SELECT state, count(*) n FROM $schema.holds GROUP BY 1 ORDER BY 1) s")
still_held=$(q "SELECT count(*) FROM $schema.holds WHERE state = 'held'")
# A withdrawal's confirmation and its hold agree: confirmed means posted (or
# already voided/expired: then the confirmation failed, dead-lettered).
posted_without_confirmation=$(q "SELECT count(*) FROM $schema.holds h WHERE h.state = 'posted'
   AND NOT EXISTS (SELECT 1 FROM $schema.payment_events e WHERE e.hold_id = h.event_id
                   AND e.event_type = 'withdrawal_confirmed' AND e.status = 'confirmed')")
failed_by_reason=$(sql "SELECT coalesce(string_agg(reason || ' ' || n, ', '), 'none') FROM (
   SELECT d.reason, count(DISTINCT d.event_id) n FROM $schema.dead_letter_queue d
     JOIN $schema.payment_events e ON e.event_id = d.event_id AND e.status = 'failed'
    GROUP BY d.reason ORDER BY 1) s")
dlq_failed=$(q "SELECT count(DISTINCT d.event_id) FROM $schema.dead_letter_queue d
   JOIN $schema.payment_events e ON e.event_id = d.event_id AND e.status = 'failed'")
# A failure the worker could not record (its session died) is spooled as a
# dead letter, and its lease then brings the event back: such letters belong
# to events that ended confirmed, which is fine — they are counted apart.
dlq_recovered=$(q "SELECT count(DISTINCT d.event_id) FROM $schema.dead_letter_queue d
   JOIN $schema.payment_events e ON e.event_id = d.event_id AND e.status = 'confirmed'")
failed_without_reason=$(q "SELECT count(*) FROM $schema.payment_events e WHERE e.status = 'failed'
   AND NOT EXISTS (SELECT 1 FROM $schema.dead_letter_queue d WHERE d.event_id = e.event_id)
   AND NOT EXISTS (SELECT 1 FROM $schema.processed_events p WHERE p.idempotency_key = $key
                   AND p.outcome = 'insufficient_funds')
   AND NOT EXISTS (SELECT 1 FROM $schema.holds h WHERE h.event_id = e.event_id AND h.state = 'rejected')")
double_credits=$(q "SELECT count(*) FROM (SELECT 1 FROM $schema.balance_events GROUP BY source_event_id, event_type HAVING count(*) > 1) d")
# One entry per confirmed credit or single-phase debit, one per captured
# withdrawal and one per captured fee; holds, voids and expiries write none.
entries_vs_expected=$(q "SELECT (SELECT count(*) FROM $schema.balance_events)
   - (SELECT count(*) FROM $schema.payment_events WHERE status = 'confirmed'
        AND event_type IN ('deposit', 'airdrop', 'withdrawal'))
   - (SELECT count(*) FROM $schema.holds WHERE state = 'posted')
   - (SELECT count(*) FROM $schema.holds WHERE state = 'posted' AND posted_fee > 0)")
not_zero_sum=$(q "SELECT count(*) FROM (SELECT asset FROM (SELECT asset, amount FROM $schema.balance_events
   UNION ALL SELECT asset, amount FROM $schema.system_entries) l GROUP BY asset HAVING sum(amount) <> 0) s")
negative=$(q "SELECT count(*) FROM $schema.accounts WHERE balance < 0 OR held < 0 OR held > balance")
unreconciled=$(q "SELECT count(*) FROM $schema.accounts a WHERE a.balance <> a.initial_balance
   + coalesce((SELECT sum(b.amount) FROM $schema.balance_events b
                WHERE b.user_id = a.user_id AND b.asset = a.asset), 0)
   OR a.held <> coalesce((SELECT sum(h.amount + h.fee) FROM $schema.holds h
                WHERE h.user_id = a.user_id AND h.asset = a.asset AND h.state = 'held'), 0)")
outbox_doubles=$(q "SELECT count(*) FROM (SELECT 1 FROM $schema.outbox GROUP BY topic, payload->>'event_id' HAVING count(*) > 1) d")
# One row per applied or refused event, and per hold one when taken (or
# refused) and one when it ended.
outbox_missing=$(q "SELECT (SELECT count(*) FROM $schema.processed_events WHERE outcome IN ('success', 'insufficient_funds'))
   + (SELECT count(*) FROM $schema.holds) + (SELECT count(*) FROM $schema.holds WHERE state IN ('posted', 'voided', 'expired'))
   - (SELECT count(*) FROM $schema.outbox)")
unsettled=$(q "$unsettled_sql")
notifications=$(q "SELECT count(*) FROM $schema.outbox")
published=$(q "SELECT count(*) FROM $schema.outbox WHERE published_at IS NOT NULL")
via_dlq=$(q "SELECT count(*) FROM $schema.relay_dead_letters WHERE resolution = 'delivered'")
dropped=$(q "SELECT count(*) FROM $schema.relay_dead_letters WHERE resolution = 'dropped'")
quarantined=$(q "SELECT count(*) FROM $schema.relay_quarantine")
mock_stats=$(mock_http GET /stats)
# Then every process the soak still runs is stopped as an operator stops it,
# all at once: SIGTERM. Each must exit 0 within 30 s. A crash or a hang on the
# way out is a violation, and so is a sanitizer's report at exit (LeakSanitizer
# runs then; its report goes to the log, counted below).
fail_if_any_ended
list_running
stopping=()
for ((i = 0; i < ${#running[@]}; i += 3)); do stopping+=("${running[i]}" "${running[i + 1]}"); done
stop_cleanly "${stopping[@]}"
mock_stat() { sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" <<<"$mock_stats"; }
received=$(mock_stat unique) received_twice=$(mock_stat duplicates)
received_late=$(mock_stat late) twice_not_late=$(mock_stat duplicates_unexplained)
wall=$(($(date +%s) - started))
# The timeline: events recorded and confirmed per second, and its chart.
per_second() { sql "SELECT extract(epoch FROM date_trunc('second', $1))::bigint, count(*)
                    FROM $schema.payment_events $2 GROUP BY 1 ORDER BY 1" | tr '|' ' '; }
per_second created_at "" >"$logs/recorded.tsv"
per_second updated_at "WHERE status = 'confirmed'" >"$logs/confirmed.tsv"
bash scripts/plot.sh soak "$logs" "$started" "$logs/soak_timeline.svg"

violations=0
row() { printf '  %-44s %s\n' "$1" "$2"; }
verdict() { if [[ "$2" == "$3" ]]; then row "$1" "$2"; else row "$1" "$2   <-- VIOLATION (want $3)"; violations=$((violations + 1)); fi; }
echo
echo "chaos soak: $events events, ${chaos_s}s of chaos, wall ${wall}s"
row "events recorded (sent: $events_sent)" "$events_recorded"
row "deliveries (both rounds, bad ones included)" "$(sed -n 's/^provider: round.* \([0-9]*\) deliveries.*/\1/p' "$logs/provider.log" | awk '{n += $1} END {print n}')"
row "duplicates absorbed" "$(sed -n 's/.*duplicates absorbed *\([0-9]*\).*/\1/p' "$logs/provider.log")"
row "deliveries refused (429/503), then redelivered" "$(sed -n 's/.*redelivered after 429\/503 *\([0-9]*\).*/\1/p' "$logs/provider.log")"
row "workers SIGKILLed" "$kills"
row "workers frozen 5 s (SIGSTOP), then thawed" "$freezes"
# The server's own word for each transaction it ended because its client said
# nothing past the idle limit: a worker frozen, or cut off by a partition,
# inside its claim-and-apply (single server).
server_log=${IDEMLEDGER_PG_DATA:-}/../server.log
if [[ -n "${IDEMLEDGER_PG_DATA:-}" && -f "$server_log" ]]; then
  row "transactions the server ended for idling" "$(grep -c "idle-in-transaction timeout" "$server_log" || true)"
fi
row "worker connections killed by the server" "$conn_kills"
if ((failovers > 0)); then
  verdict "failovers (primary SIGKILLed, standby promoted, rejoined)" "$failovers_done" "$failovers"
  row "seconds without writes, each (a client's view)" "${failover_seconds[*]:-none}"
else
  row "database restarts (1 crash: stop -m immediate)" "$db_restarts"
fi
((partitions == 0)) || verdict "database partitions (its address gone 12 s, packets dropped)" "$partitions_done" "$partitions"
row "hot-user lock holds (2 s)" "$lock_holds"
row "relays SIGKILLed" "$relay_kills"
row "relays frozen 15 s, past their lease (SIGSTOP)" "$relay_freezes"
row "intake SIGKILLed (ids acknowledged before the last kill)" "$intake_kills ($acks_checked)"
verdict "answered 200, not in the table when intake died" "$acked_missing" 0
row "API outages (503 for 3 s)" "$api_outages"
row "confirmed" "$confirmed"
row "failed: insufficient funds (withdrawals, holds)" "$((insufficient + rejected)) ($insufficient, $rejected)"
row "holds by final state" "$holds"
row "failed: dead-lettered (events, by reason)" "$dlq_failed ($failed_by_reason)"
row "dead letters of events recovered later" "$dlq_recovered"
verdict "lost (recorded != sent)" "$((events_sent - events_recorded))" 0
verdict "not final" "$not_final" 0
verdict "failed with no reason (neither business nor DLQ)" "$failed_without_reason" 0
verdict "double credits" "$double_credits" 0
verdict "ledger entries - applied events, captures and fees" "$entries_vs_expected" 0
verdict "assets whose postings do not sum to zero" "$not_zero_sum" 0
verdict "holds still held (every withdrawal settled or expired)" "$still_held" 0
verdict "holds posted without a confirmed confirmation" "$posted_without_confirmation" 0
verdict "negative balances" "$negative" 0
verdict "accounts out of balance or held (reconciliation)" "$unreconciled" 0
verdict "outbox rows twice for one event" "$outbox_doubles" 0
verdict "final events without their outbox row" "$outbox_missing" 0
verdict "provider simulator's own invariants (exit code)" "$provider_status" 0
verdict "processes not stopped cleanly by SIGTERM (exit 0 in 30 s)" "${#stop_failures[@]}" 0
for u in "${stop_failures[@]}"; do row "  ... ${u%%: *}" "${u#*: }"; done
# A sanitizer build's report goes to the process's log (TSan's, with a
# log_path, to its own files: scripts/tsan-services.sh counts those).
verdict "sanitizer reports in the processes' logs" \
  "$(grep -l -E 'ERROR: (Address|Leak)Sanitizer|runtime error:|WARNING: ThreadSanitizer' "$logs"/*.log | wc -l)" 0
row "notifications written" "$notifications"
row "delivered (after a stay in the relay's DLQ)" "$published ($via_dlq)"
verdict "notifications not delivered" "$unsettled" 0
verdict "dropped or quarantined" "$((dropped + quarantined))" 0
verdict "delivered but never received by the API" "$((published - received))" 0
# A 2xx whose mark was lost (relay killed or frozen past its lease, its
# session killed, the database restarting or cut off) is delivered again after
# the lease, with the same key. A frozen relay sends nothing once its claim
# has ended: what it sends after the thaw is late, by the deadline it sends.
row "received twice (acted on after the relay gave up)" "$received_twice ($received_late)"
mark_losses=$(((relay_kills + relay_freezes + conn_kills + (db_restarts + failovers_done + partitions_done) * 2) * relay_in_flight))
verdict "received twice beyond what late answers and lost marks explain" \
  "$((twice_not_late > mark_losses ? twice_not_late : 0))" 0
if ((failovers > 0)); then
  # Reads off the primary: the admin CLI's read-only verbs on the standby
  # (target_session_attrs=prefer-standby) answer what the primary answers,
  # and say how far behind the standby was.
  bash scripts/cluster.sh wait-healthy "$IDEMLEDGER_CLUSTER_DIR" 120 >/dev/null
  # The liabilities are compared once the standby has replayed all the primary wrote.
  lsn=$(sql "SELECT pg_current_wal_lsn()")
  for _ in $(seq 1 100); do
    [[ $(psql -X -q -t -A -d "$IDEMLEDGER_CLUSTER_STANDBY_DSN" -c "SELECT pg_is_in_recovery()
           AND pg_last_wal_replay_lsn() >= '$lsn'::pg_lsn") == t ]] && break
    sleep 0.1
  done
  admin=("$build/tools/idemledger-admin/idemledger-admin" --schema "$schema" --quiet)
  on_standby=$("${admin[@]}" --dsn "$IDEMLEDGER_CLUSTER_STANDBY_DSN" reconcile --full 2>&1 || true)
  verdict "reconciliation on the standby: out of balance, duplicates, assets not zero" \
    "$(sed -n 's/.* \([0-9]*\) out of balance, \([0-9]*\) duplicate.*, \([0-9]*\) assets .*/\1 \2 \3/p' <<<"$on_standby")" "0 0 0"
  verdict "  ... read on a standby (its replay lag, ms)" \
    "$(grep -c '^read on a standby' <<<"$on_standby") ($(sed -n 's/^read on a standby, replay lag \([0-9]*\) ms.*/\1/p' <<<"$on_standby"))" \
    "1 ($(sed -n 's/^read on a standby, replay lag \([0-9]*\) ms.*/\1/p' <<<"$on_standby"))"
  # shellcheck disable=SC2153  # exported by scripts/with-cluster.sh
  primary_liabilities=$("${admin[@]}" --dsn "$IDEMLEDGER_CLUSTER_DSN" liabilities)
  standby_liabilities=$("${admin[@]}" --dsn "$IDEMLEDGER_CLUSTER_STANDBY_DSN" liabilities | grep -v '^read on a standby')
  verdict "liabilities per asset, standby vs primary" \
    "$([[ "$standby_liabilities" == "$primary_liabilities" ]] && echo equal || echo different)" equal
fi
if ((violations > 0)); then
  echo "chaos soak: $violations VIOLATION(S)"
  exit 1
fi
echo "chaos soak: every invariant holds"

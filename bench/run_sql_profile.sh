#!/usr/bin/env bash
# run_sql_profile.sh [EVENTS=20000] [G...=3 16]
#
# What the server spends per queued deposit, step by step, on ONE quiet
# private PostgreSQL: idemledger's own SQL beside bench/queue_floor_own.sql,
# which writes the same rows on the same schema in the fewest plain
# statements. One session at a time, so the figures are the SQL's and not the
# host's (on these 2 cores a loaded run inflates every figure by its
# contention). For each G (events per call), EVENTS events each way:
#   - record: G deposits, each delivered twice, per call and commit — the
#     floor's record statement, then intake's call of record_events()
#     (bench/record_events.sql);
#   - claim and apply, on the backlog that record left pending, up to G events
#     per transaction — the floor's claim and apply statements; our
#     claim_events() and apply_steps() driven by pgbench
#     (bench/claim_apply.sql); and one outbox_worker with one thread and
#     IDEMLEDGER_BATCH_SIZE=G, draining it as in the service.
# Each figure is the server's CPU per event over the step (/proc: every
# server process, so parse, bind, commit and the wire are in it), read after
# the step's sessions are gone. Autovacuum is off: whether it happens to run
# inside a step or just after it moved these figures by a third; each step
# starts vacuumed and checkpointed instead, and leaves as many dead row
# versions as the other way's.
set -euo pipefail
cd "$(dirname "$0")/.."
total=${1:-20000}
shift || true
gs=("$@")
((${#gs[@]})) || gs=(3 16)
[[ "$total" =~ ^[1-9][0-9]{2,6}$ ]] || { echo "run_sql_profile.sh: EVENTS is an integer in [100, 9999999], got '$total'" >&2; exit 2; }
for g in "${gs[@]}"; do
  if ! [[ "$g" =~ ^[1-9][0-9]?$ ]] || ((g > 32)); then
    echo "run_sql_profile.sh: each G is an integer in [1, 32] (record_events.sql's ids), got '$g'" >&2
    exit 2
  fi
done

if [[ -z "${IDEMLEDGER_PG_PORT:-}" ]]; then
  bash scripts/build.sh build
  IDEMLEDGER_PG_OPTS="${IDEMLEDGER_PG_OPTS:-} -c autovacuum=off" \
    exec bash scripts/with-postgres.sh build/profile-pg bash "$0" "$total" "${gs[@]}"
fi

conn=(-h "$IDEMLEDGER_PG_SOCKET" -p "$IDEMLEDGER_PG_PORT" -U postgres)
psql=(psql -X -q -v ON_ERROR_STOP=1 "${conn[@]}")
pgbench=$(command -v pgbench || echo "$IDEMLEDGER_PG_BIN/pgbench")
# shellcheck source=bench/server.sh
source bench/server.sh
q() { "${psql[@]}" -d postgres -t -A -c "$1"; }
events() { q "SELECT count(*) FROM prof.payment_events ${1:+WHERE status = '$1'}"; }

# fresh_schema: the schema `provider_simulator setup` makes (200 users with
# deposit addresses, the default asset), empty of events.
fresh_schema() {
  q "DROP SCHEMA IF EXISTS prof CASCADE" >/dev/null 2>&1
  IDEMLEDGER_DSN="$IDEMLEDGER_TEST_DSN" IDEMLEDGER_SCHEMA=prof IDEMLEDGER_WEBHOOK_SECRET=unused \
    build/examples/provider_simulator/provider_simulator setup >/dev/null
  q "CHECKPOINT" >/dev/null
}
# settle: what the step before left behind is vacuumed and flushed, so the
# next step's CPU is its own.
settle() { q "VACUUM ANALYZE" >/dev/null && q "CHECKPOINT" >/dev/null; }
# step_cpu NAME COMMAND...: runs COMMAND, waits for its sessions to go, and
# sets cpu[NAME] to the server's CPU per event over it (µs), events being
# those in the schema once it ran.
declare -A cpu
step_cpu() {
  local name=$1 c0 c1
  shift
  c0=$(pg_cpu_ms)
  "$@"
  sessions_gone postgres
  c1=$(pg_cpu_ms)
  cpu[$name]=$(((c1 - c0) * 1000 / $(events)))
}
bench_run() {  # bench_run G SCRIPT ARGS...: one pgbench client on the schema prof, EVENTS / G passes
  local g=$1 script=$2 out
  shift 2
  out=$(PGOPTIONS="-c search_path=prof" "$pgbench" -n -M prepared -c 1 -t $((total / g)) "${conn[@]}" \
    -D g="$g" "$@" -f "$script" postgres 2>&1) || { echo "$out" >&2; exit 1; }
}
all_confirmed() {  # all_confirmed LABEL: every event in the schema is confirmed, or the run stops
  local n confirmed
  n=$(events) confirmed=$(events confirmed)
  ((confirmed == n)) || { echo "run_sql_profile.sh: $1 confirmed $confirmed of $n" >&2; exit 1; }
}
drain() {  # drain G: one outbox_worker with one thread claims up to G at a time until all are confirmed
  local worker
  IDEMLEDGER_DSN="$IDEMLEDGER_TEST_DSN" IDEMLEDGER_SCHEMA=prof IDEMLEDGER_METRICS_PORT=0 \
    IDEMLEDGER_WORKER_THREADS=1 IDEMLEDGER_BATCH_SIZE="$1" IDEMLEDGER_DLQ_SPOOL="build/profile-pg/worker.spool" \
    IDEMLEDGER_DLQ_SPOOL_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n') \
    build/examples/outbox_worker/outbox_worker >build/profile-pg/worker.log 2>&1 &
  worker=$!
  # 100 events/s at least; all_confirmed says if not.
  poll_until_zero "SELECT count(*) FROM prof.payment_events WHERE status <> 'confirmed'" 0.2 $((total / 20 + 300)) || true
  kill -TERM "$worker"
  wait "$worker" 2>/dev/null || true
}
# record NAME G SCRIPT ARGS...: a fresh schema, EVENTS deposits recorded
# pending by bench_run, that step measured as cpu[NAME], then settled.
record() {
  local name=$1
  shift
  fresh_schema && step_cpu "$name" bench_run "$@" && settle
}
floor_record=(bench/queue_floor_own.sql -D record=1 -D apply=0 -D together=1)

for g in "${gs[@]}"; do
  record "floor_record_$g" "$g" "${floor_record[@]}"
  step_cpu "floor_apply_$g" bench_run "$g" bench/queue_floor_own.sql -D record=0 -D apply=1 -D together=1
  all_confirmed "the floor"
  record "ours_record_$g" "$g" bench/record_events.sql
  step_cpu "ours_apply_$g" drain "$g"
  all_confirmed "the worker"
  # The same backlog shape for our SQL driven by pgbench (its record not measured again).
  fresh_schema && bench_run "$g" "${floor_record[@]}" && settle
  step_cpu "pgbench_apply_$g" bench_run "$g" bench/claim_apply.sql
  all_confirmed "claim_apply.sql"
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2fx", a / b; else print "-"}'; }
row() { printf '%-44s %8s %8s %10s\n' "$1" "$2" "$3" "$(ratio "$2" "$3")"; }
printf '\nThe queued path on a quiet server: the server'"'"'s CPU per event, µs (%s events each)\n' "$total"
for g in "${gs[@]}"; do
  printf '\n%-44s %8s %8s %10s\n' "g = $g events per call" ours floor "ours/floor"
  row "record (each event delivered twice)" "${cpu[ours_record_$g]}" "${cpu[floor_record_$g]}"
  row "claim and apply: outbox_worker" "${cpu[ours_apply_$g]}" "${cpu[floor_apply_$g]}"
  row "  ... our SQL, driven by pgbench" "${cpu[pgbench_apply_$g]}" "${cpu[floor_apply_$g]}"
  row "the path (record + the worker's)" "$((${cpu[ours_record_$g]} + ${cpu[ours_apply_$g]}))" \
    "$((${cpu[floor_record_$g]} + ${cpu[floor_apply_$g]}))"
done

#!/usr/bin/env bash
# run_load.sh [CLIENTS=4] [SECONDS=20] [ROUNDS=1]
#
# End-to-end deposit throughput, side by side on ONE private PostgreSQL in ONE
# run: idemledger's process_deposit (bench/ledger_load) against pgbench with
# the reference scripts in bench/reference/ — the seed's 13-statement deposit
# and the one-statement floor — and pgbench's built-in simple-update. Same
# client count, same duration, populated start state, prepared protocol.
# Prints deposits/s, p50/p99 latency (median over rounds) and the ratios,
# the headline ratios also as the median of TRIPLES (default 3) back-to-back
# triples of process_deposit, seed and floor per round;
# then the same deposit workload and the floor at 16 clients (deposits of one
# asset to 10,000 different users: with a row every deposit wrote — a stored
# system balance — idemledger would stop scaling where the floor does not),
# batches (process_batch, 100 deposits per call; and mixed: 30% withdrawals,
# 10% replays) per event against the seed and the single loop, two-phase
# withdrawals (hold, then post: two transactions) per second,
# and the driver's own CPU per operation (getrusage), beside pgbench's own
# CPU per transaction of the floor: what one round trip and one commit cost a
# libpq client that does nothing else, the floor of that figure.
# Then, on the same server, the whole service (webhook_intake + 2 outbox_worker
# processes, 16 provider senders, SIM_EVENTS events): deposits only (what the
# bare loop measures), again with each claim committed before its apply,
# again with every worker thread claiming (no spare), and the demo's mix; webhook -> confirmed
# events/s and time-to-confirm next to the bare process_deposit figure; then
# SERVICE_TRIPLES (3) triples of the bare loop, the service deposits only with
# 16 senders and with 64, back to back, a ratio taken inside each triple; and
# where the CPU goes per event (each service's own getrusage, logged at its
# stop; the server's from /proc, and its share in intake's and the workers'
# sessions by application_name) with intake's and a worker's peak RSS, and
# the ceiling these 2 cores put on it: the bare loop's server CPU per deposit
# (read inside one more run of it) plus the provider's, then plus intake's and
# the workers', then with the server's as measured in their sessions, each as
# 2 cores / µs; and where a delivery's time goes: a sender's cycle, intake's
# wait for its group commit and that commit's record (its /metrics
# histograms), the commit's session's CPU and wait for a core (schedstat);
# beside it the queued path's floor: bench/queue_floor.sql, what PostgreSQL
# itself needs to record every event twice, claim and apply it (g events per
# statement, set-based), its rate and server CPU per event, and the ceiling
# a service whose SQL cost that much would have; and bench/queue_floor_own.sql,
# the same on idemledger's own schema, writing every row the service writes.
# Last, the queue alone: a backlog of recorded deposits drained by the same
# 2 workers, events/s beside the bare loop (no HTTP, no provider).
# In the first round it also runs the three deposit workloads at 1 client and
# the seed at 16, and then draws build/bench-results/throughput_vs_clients.svg
# and latency.svg with gnuplot (scripts/plot.sh), beside the data they show.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-4} seconds=${2:-20} rounds=${3:-1}
# Checked before any arithmetic reads them, as run_scale.sh checks its own.
for n in "$clients" "$seconds" "$rounds" "${TRIPLES:=3}" "${SERVICE_TRIPLES:=3}"; do
  [[ "$n" =~ ^[1-9][0-9]{0,3}$ ]] || { echo "run_load.sh: arguments, TRIPLES and SERVICE_TRIPLES are integers in [1, 9999], got '$n'" >&2; exit 2; }
done

if [[ -z "${IDEMLEDGER_PG_PORT:-}" ]]; then
  bash scripts/build.sh build
  exec bash scripts/with-postgres.sh build/bench-pg bash "$0" "$clients" "$seconds" "$rounds"
fi

ref=bench/reference
results=build/bench-results
mkdir -p "$results"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
conn=(-h "$IDEMLEDGER_PG_SOCKET" -p "$IDEMLEDGER_PG_PORT" -U postgres)
psql=(psql -X -q -v ON_ERROR_STOP=1 "${conn[@]}")
pgbench=$(command -v pgbench || echo "$IDEMLEDGER_PG_BIN/pgbench")

"${psql[@]}" -d postgres -c "CREATE DATABASE seedref"
"${psql[@]}" -d postgres -c "CREATE DATABASE builtin"
"${psql[@]}" -d seedref -f "$ref/seed_schema.sql" >/dev/null 2>&1
"$pgbench" -i -q -s 10 "${conn[@]}" builtin >/dev/null 2>&1

# percentile FILE P: the P-th percentile of pgbench per-transaction latencies (µs).
percentile() { awk '{print $3}' "$1" | sort -n | awk -v p="$2" '{a[NR]=$1} END {i=int(NR*p/100); if (i<1) i=1; print a[i]}'; }

# run_pgbench NAME DB ARGS...: one pgbench run, appends "NAME tps p50 p99 -" to results
# (pgbench's own CPU is not ours to report).
run_pgbench() {
  local name=$1 db=$2
  shift 2
  rm -f "$work"/log.*
  local out
  out=$("$pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" -l --log-prefix="$work/log" "${conn[@]}" "$@" "$db" 2>&1) \
    || { echo "$out" >&2; exit 1; }
  cat "$work"/log.* >"$work/all"
  local tps
  tps=$(echo "$out" | awk '/^tps = / {printf "%d", $3; exit}')
  echo "$name $tps $(percentile "$work/all" 50) $(percentile "$work/all" 99) -" >>"$work/results"
  # Every latency of the run (µs, ascending), for the latency chart: the yardsticks it shows.
  case $name in one_statement | seed_sequence) awk '{print $3}' "$work/all" | sort -n >"$results/latency_$name.txt" ;; esac
}

# pgbench_cpu NAME DB ARGS...: pgbench's own CPU (user + system, from the
# shell's `times`) per transaction, in a run without its per-transaction log;
# appends "NAME - - - cpu_us" to results.
pgbench_cpu() {
  local name=$1 db=$2 out
  shift 2
  out=$( ("$pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" "${conn[@]}" "$@" "$db" 2>&1; times)) \
    || { echo "$out" >&2; exit 1; }
  awk -v name="$name" '
    function seconds(t) { split(t, p, "m"); return p[1] * 60 + substr(p[2], 1, length(p[2]) - 1) }
    /^number of transactions actually processed:/ {n = $NF}
    {last = $0}
    END {split(last, c, " "); printf "%s - - - %.1f\n", name, (seconds(c[1]) + seconds(c[2])) * 1e6 / n}' \
    <<<"$out" >>"$work/results"
}

reset_seed() { "${psql[@]}" -d seedref -v hist=100000 -f "$ref/seed_reset.sql" >/dev/null 2>&1; "${psql[@]}" -d seedref -c "VACUUM ANALYZE" -c "CHECKPOINT"; }

for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds: $clients clients x ${seconds}s per workload" >&2
  # ledger_load NAME [FLAGS...]: one run of the driver, appends "NAME tps p50 p99 cpu_us" to results.
  ledger_load() {
    local name=$1
    shift
    build/bench/ledger_load --dsn "$IDEMLEDGER_TEST_DSN" --clients "$clients" --seconds "$seconds" "$@" \
      | awk -v name="$name" '/^RESULT/ {for (i = 1; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}
                                         print name, v["tps"], v["p50_us"], v["p99_us"], v["cpu_us"]}' >>"$work/results"
  }
  # The first workload of a round has run slower than the same workload later
  # in it: a short warm-up, not reported, and the driver's 4-client workloads
  # take turns at going first (round r starts at the r-th).
  ledger_load warmup --seconds 5 --history 20000
  # The headline, process_deposit against the two yardsticks, as TRIPLES
  # back-to-back triples, each run from its own fresh populated state, the
  # order reversed every other triple. This machine's speed drifts by ±20%
  # within minutes, so a ratio is taken inside each triple and the median of
  # the triples' ratios is reported beside the median rates.
  for ((triple = 1; triple <= TRIPLES; triple++)); do
    order=(ours seed floor)
    if ((triple % 2 == 0)); then order=(floor seed ours); fi
    for w in "${order[@]}"; do
      case $w in
        ours) ledger_load idemledger --latency-log "$results/latency_idemledger.txt" ;;
        seed) reset_seed && run_pgbench seed_sequence seedref -f "$ref/seed_sequence.sql" ;;
        floor) reset_seed && run_pgbench one_statement seedref -f "$ref/one_statement.sql" ;;
      esac
    done
    # The triple's own rates are the last of each name in the results.
    awk '$1 == "idemledger" {i = $2} $1 == "one_statement" {f = $2} $1 == "seed_sequence" {s = $2}
         END {printf "%.3f %.3f\n", i / f, i / s}' "$work/results" >>"$work/triples"
  done
  turns=(batch100 batch100_mixed idemledger_metrics idemledger_partitioned hold_post hold_post_batch60)
  for ((k = 0; k < ${#turns[@]}; k++)); do
    case ${turns[(k + round - 1) % ${#turns[@]}]} in
      batch100) ledger_load batch100 --batch 100 ;;
      batch100_mixed) ledger_load batch100_mixed --batch 100 --mixed ;;
      idemledger_metrics) ledger_load idemledger_metrics --metrics ;;
      idemledger_partitioned) ledger_load idemledger_partitioned --partitioned ;;
      hold_post) ledger_load hold_post --workload hold_post ;;
      hold_post_batch60) ledger_load hold_post_batch60 --workload hold_post --batch 60 ;;
    esac
  done
  clients=16 ledger_load idemledger_c16
  reset_seed
  clients=16 run_pgbench one_statement_c16 seedref -f "$ref/one_statement.sql"
  run_pgbench simple_update builtin -b simple-update
  if ((round == 1)); then  # the rest of the curve by clients, once
    clients=1 ledger_load idemledger_c1
    reset_seed
    clients=1 run_pgbench one_statement_c1 seedref -f "$ref/one_statement.sql"
    reset_seed
    clients=1 run_pgbench seed_sequence_c1 seedref -f "$ref/seed_sequence.sql"
    reset_seed
    clients=16 run_pgbench seed_sequence_c16 seedref -f "$ref/seed_sequence.sql"
    reset_seed
    pgbench_cpu one_statement_cpu seedref -f "$ref/one_statement.sql"
  fi
done

# Median of each column per workload, then the table.
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A tps p50 p99 cpu
workloads=(idemledger idemledger_metrics idemledger_partitioned seed_sequence one_statement simple_update)
for w in "${workloads[@]}" batch100 batch100_mixed hold_post hold_post_batch60 idemledger_c16 one_statement_c16 idemledger_c1 \
  one_statement_c1 seed_sequence_c1 seed_sequence_c16 one_statement_cpu; do
  tps[$w]=$(awk -v w="$w" '$1==w {print $2}' "$work/results" | median)
  p50[$w]=$(awk -v w="$w" '$1==w {print $3}' "$work/results" | median)
  p99[$w]=$(awk -v w="$w" '$1==w {print $4}' "$work/results" | median)
  cpu[$w]=$(awk -v w="$w" '$1==w && $5 != "-" {print $5}' "$work/results" | median)
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a / b}'; }
printf '\nEnd-to-end deposits, %s clients, %ss per workload, %s round(s), one server, one run\n' "$clients" "$seconds" "$rounds"
printf '%-40s %10s %9s %9s %18s\n' workload "deposits/s" "p50 µs" "p99 µs" "idemledger / this"
for w in "${workloads[@]}"; do
  case $w in
    idemledger) label="idemledger process_deposit" ;;
    idemledger_metrics) label="  ... recording LedgerMetrics" ;;
    idemledger_partitioned) label="  ... on monthly partitions" ;;
    seed_sequence) label="seed: 13 statements, 13 round trips" ;;
    one_statement) label="floor: one data-modifying CTE" ;;
    simple_update) label="pgbench built-in simple-update" ;;
  esac
  printf '%-40s %10s %9s %9s %18s\n' "$label" "${tps[$w]}" "${p50[$w]}" "${p99[$w]}" "$(ratio "${tps[idemledger]}" "${tps[$w]}")"
done

# spread FILE COLUMN: the median, least, greatest and count of one column.
spread() { awk -v c="$2" '{print $c}' "$1" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)], a[1], a[NR], NR}'; }
# ratio_spread COLUMN: "median (min-max)" of one ratio over every triple.
ratio_spread() {
  local m lo hi n
  read -r m lo hi n < <(spread "$work/triples" "$1")
  printf '%.2fx (%.2f-%.2f over %d triples)' "$m" "$lo" "$hi" "$n"
}
printf '%-40s %s\n' "idemledger / floor, within each triple" "$(ratio_spread 1)"
printf '%-40s %s\n' "idemledger / seed, within each triple" "$(ratio_spread 2)"

printf '\nScaling to 16 clients (deposits of one asset to 10,000 users; no row every deposit writes)\n'
printf '%-40s %10s %10s %12s\n' workload "$clients clients" "16 clients" "16 / $clients"
printf '%-40s %10s %10s %12s\n' "idemledger process_deposit" "${tps[idemledger]}" "${tps[idemledger_c16]}" "$(ratio "${tps[idemledger_c16]}" "${tps[idemledger]}")"
printf '%-40s %10s %10s %12s\n' "floor: one data-modifying CTE" "${tps[one_statement]}" "${tps[one_statement_c16]}" "$(ratio "${tps[one_statement_c16]}" "${tps[one_statement]}")"
printf '%-40s %10s %12s\n' "idemledger / floor at 16 clients" "" "$(ratio "${tps[idemledger_c16]}" "${tps[one_statement_c16]}")"

printf '\nDeposits/s by clients (1 client, and the seed at 16: first round only)\n'
printf '%-40s %10s %10s %10s\n' workload "1 client" "$clients clients" "16 clients"
printf '%-40s %10s %10s %10s\n' "idemledger process_deposit" "${tps[idemledger_c1]}" "${tps[idemledger]}" "${tps[idemledger_c16]}"
printf '%-40s %10s %10s %10s\n' "floor: one data-modifying CTE" "${tps[one_statement_c1]}" "${tps[one_statement]}" "${tps[one_statement_c16]}"
printf '%-40s %10s %10s %10s\n' "seed: 13-statement sequence" "${tps[seed_sequence_c1]}" "${tps[seed_sequence]}" "${tps[seed_sequence_c16]}"
{
  echo "1 ${tps[idemledger_c1]} ${tps[one_statement_c1]} ${tps[seed_sequence_c1]}"
  echo "$clients ${tps[idemledger]} ${tps[one_statement]} ${tps[seed_sequence]}"
  echo "16 ${tps[idemledger_c16]} ${tps[one_statement_c16]} ${tps[seed_sequence_c16]}"
} >"$results/throughput.tsv"
bash scripts/plot.sh throughput "$results/throughput.tsv" "$results/throughput_vs_clients.svg" >&2
bash scripts/plot.sh latency "$results/latency_idemledger.txt" "$results/latency_one_statement.txt" \
  "$results/latency_seed_sequence.txt" "$clients" "$results/latency.svg" >&2

printf '\nBatches, %s clients (process_batch: 100 events per call, one transaction and one round trip each)\n' "$clients"
printf '%-40s %10s %9s %9s %10s %10s\n' workload "events/s" "p50 µs" "p99 µs" "/ seed" "/ single"
for w in batch100 batch100_mixed; do
  case $w in
    batch100) label="100 deposits" ;;
    batch100_mixed) label="100 mixed: 30% withdrawals, 10% replays" ;;
  esac
  printf '%-40s %10s %9s %9s %10s %10s\n' "$label" "${tps[$w]}" "${p50[$w]}" "${p99[$w]}" \
    "$(ratio "${tps[$w]}" "${tps[seed_sequence]}")" "$(ratio "${tps[$w]}" "${tps[idemledger]}")"
done
printf '%-40s %10s\n' "single process_deposit (above)" "${tps[idemledger]}"
printf '%-40s %10s\n' "seed: 13 statements (above)" "${tps[seed_sequence]}"

printf '\nTwo-phase withdrawals, %s clients (hold amount + fee, then post it: two transactions each, or 30 pairs in one: 60 subtransactions)\n' "$clients"
printf '%-40s %10s %9s %9s %10s\n' workload "pairs/s" "p50 µs" "p99 µs" "/ singles"
printf '%-40s %10s %9s %9s %10s\n' "hold + post" "${tps[hold_post]}" "${p50[hold_post]}" "${p99[hold_post]}" "1.00x"
printf '%-40s %10s %9s %9s %10s\n' "30 holds + their 30 posts per call" "${tps[hold_post_batch60]}" \
  "${p50[hold_post_batch60]}" "${p99[hold_post_batch60]}" "$(ratio "${tps[hold_post_batch60]}" "${tps[hold_post]}")"
printf '%-40s %10s\n' "steps/s (two per pair)" "$((tps[hold_post] * 2))"
printf '%-40s %10s\n' "deposits/s (above)" "${tps[idemledger]}"

printf '\nClient CPU per operation (the driver process: user + system over the timed loop / operations)\n'
printf '%-40s %10s\n' workload "CPU µs"
printf '%-40s %10s\n' "process_deposit, 1 client" "${cpu[idemledger_c1]}"
printf '%-40s %10s\n' "process_deposit, $clients clients" "${cpu[idemledger]}"
printf '%-40s %10s\n' "process_deposit, 16 clients" "${cpu[idemledger_c16]}"
printf '%-40s %10s\n' "  ... recording LedgerMetrics" "${cpu[idemledger_metrics]}"
printf '%-40s %10s\n' "hold + post (per pair)" "${cpu[hold_post]}"
printf '%-40s %10s\n' "  ... 30 pairs per process_steps" "${cpu[hold_post_batch60]}"
printf '%-40s %10s\n' "process_batch of 100 (per event)" "${cpu[batch100]}"
printf '%-40s %10s\n' "  ... mixed (per event)" "${cpu[batch100_mixed]}"
printf '%-40s %10s\n' "yardstick: pgbench, floor, $clients clients" "${cpu[one_statement_cpu]}"

# The server's CPU (pg_cpu_ms), waiting for sessions to be reaped
# (sessions_gone) and polling it (poll_until_zero), shared with
# run_sql_profile.sh.
# shellcheck source=bench/server.sh
source bench/server.sh

# The bare loop's own cost per deposit: one more run of the driver on the
# schema the last one left (--reuse), the server's CPU and the machine's busy
# time read over a window inside its timed loop (its set-up before and its
# reconciliation after left out), over the deposits its rate gives in that
# window. The service below is held against it.
# jiffies_awk: from a "cpu" line of /proc/stat, the machine's busy jiffies so
# far, all of them, and those it spent idle waiting on the disk (iowait).
jiffies_awk='$1 == "cpu" {busy = $2 + $3 + $4 + $7 + $8 + $9; all = busy + $5 + $6; io = $6}'
machine_jiffies() { head -n 1 /proc/stat | awk "$jiffies_awk"' {print busy, all}'; }
bare_window=$((seconds > 9 ? seconds - 6 : 3))
build/bench/ledger_load --dsn "$IDEMLEDGER_TEST_DSN" --clients "$clients" --seconds $((bare_window + 6)) --reuse \
  >"$work/bare.out" &
bare_pid=$!
sleep 3
pg0=$(pg_cpu_ms)
read -r busy0 all0 < <(machine_jiffies)
sleep "$bare_window"
pg1=$(pg_cpu_ms)
read -r busy1 all1 < <(machine_jiffies)
wait "$bare_pid" || { cat "$work/bare.out" >&2; exit 1; }
bare_tps=$(sed -n 's/^RESULT.* tps=\([0-9]*\).*/\1/p' "$work/bare.out")
bare_client=$(sed -n 's/^RESULT.* cpu_us=\([0-9.]*\).*/\1/p' "$work/bare.out")
hz=$(getconf CLK_TCK)
bare_deposits=$((bare_tps * bare_window))
bare_server=$(((pg1 - pg0) * 1000 / bare_deposits))
bare_machine=$(((busy1 - busy0) * 1000000 / hz / bare_deposits))
bare_busy=$((100 * (busy1 - busy0) / (all1 - all0)))

# The queued path's floor: bench/queue_floor.sql (every event recorded twice,
# claimed, applied set-based; g events per statement, 3 commits per g) on the
# reference schema, the same clients. Its rate is the events it confirmed over
# the run's seconds; its server CPU is read around the run (pgbench connects
# and its backends exit inside it, and are waited for). queue_floor NAME G
# TOGETHER sets qf[NAME_tps], qf[NAME_server] (µs per event) and its label.
declare -A qf
confirmed() { "${psql[@]}" -d seedref -t -A -c "SELECT count(*) FROM payment_events WHERE status = 'confirmed'"; }
# floor_run NAME DB COUNT LABEL PGBENCH-ARGS...: one pgbench run of a floor on
# DB; COUNT is a command printing the events confirmed so far. Sets
# qf[NAME_tps], qf[NAME_server] (µs per event confirmed) and qf[NAME_label].
floor_run() {
  local name=$1 db=$2 count=$3 label=$4 out before after pg_before pg_after
  shift 4
  before=$($count) pg_before=$(pg_cpu_ms)
  out=$("$pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" --max-tries=10 "${conn[@]}" "$@" "$db" 2>&1) \
    || { echo "$out" >&2; exit 1; }
  sessions_gone "$db"
  pg_after=$(pg_cpu_ms) after=$($count)
  ((after > before)) || { echo "run_load.sh: $label confirmed nothing" >&2; exit 1; }
  qf[${name}_tps]=$(((after - before) / seconds))
  qf[${name}_server]=$(((pg_after - pg_before) * 1000 / (after - before)))
  qf[${name}_label]=$label
}
queue_floor() {
  local name=$1 g=$2 together=$3 label="g = $2: record, claim, apply (3 commits)"
  if ((together)); then label="g = $g, claim + apply in one commit"; fi
  reset_seed
  floor_run "$name" seedref confirmed "$label" -D g="$g" -D together="$together" -f bench/queue_floor.sql
}
queue_floor g3 3 0
queue_floor g6 6 0
queue_floor g6_together 6 1

# The same floor on idemledger's own schema (bench/queue_floor_own.sql): the
# rows the service writes — fingerprints, both ledger legs, lease, trace —
# with every index and constraint the schema has, in plain statements; claim
# and apply in one commit as the workers do. A fresh schema made by
# provider_simulator setup; server CPU read as for queue_floor.
own_confirmed() { "${psql[@]}" -d postgres -t -A -c "SELECT count(*) FROM qfloor.payment_events WHERE status = 'confirmed'"; }
own_floor() {
  "${psql[@]}" -d postgres -c "DROP SCHEMA IF EXISTS qfloor CASCADE" >/dev/null 2>&1
  IDEMLEDGER_DSN="$IDEMLEDGER_TEST_DSN" IDEMLEDGER_SCHEMA=qfloor \
    build/examples/provider_simulator/provider_simulator setup >/dev/null
  PGOPTIONS="-c search_path=qfloor" floor_run "$1" postgres own_confirmed "own schema, g = $2, one commit" \
    -D g="$2" -D together=1 -D record=1 -D apply=1 -f bench/queue_floor_own.sql
  "${psql[@]}" -d postgres -c "DROP SCHEMA qfloor CASCADE" >/dev/null 2>&1
}
own_floor own_g4 4
own_floor own_g6 6

# usage LOG...: "cpu_ms peak_rss_kb context_switches" over the services whose
# logs are given (each logs its own at its stop: the sums, the largest peak).
usage() {
  local present=()
  for f in "$@"; do if [[ -f "$f" ]]; then present+=("$f"); fi; done
  ((${#present[@]} > 0)) || { echo "0 0 0"; return; }
  sed -n 's/.*"usage":{"context_switches":\([0-9]*\),"cpu_ms":\([0-9]*\),"max_rss_kb":\([0-9]*\)}.*/\2 \3 \1/p' \
    "${present[@]}" | awk '{c += $1; if ($2 > m) m = $2; x += $3} END {printf "%d %d %d\n", c, m, x}'
}
# run_service NAME [VAR=VALUE...]: the whole service once on a fresh schema
# (scripts/demo-services.sh: intake, 2 workers, the provider; relays and the
# mock API unless DEMO_RELAYS=0); sets svc[NAME_*]: rate, time to confirm,
# per-event CPU by component, peak RSS.
declare -A svc
run_service() {
  local name=$1
  shift
  "${psql[@]}" -d postgres -c "DROP SCHEMA IF EXISTS demo CASCADE" >/dev/null 2>&1
  local pg_before pg_after
  pg_before=$(pg_cpu_ms)
  env SIM_EVENTS="$SIM_EVENTS" DEMO_SESSION_CPU="$work/sessions" DEMO_MACHINE_STAT="$work/machine" "$@" bash scripts/demo-services.sh >"$work/service.log" 2>&1 \
    || { cat "$work/service.log" >&2; exit 1; }
  sessions_gone postgres
  pg_after=$(pg_cpu_ms)
  local logs=build/demo-logs n
  read -r svc[${name}_tps] svc[${name}_p50] svc[${name}_p99] < <(sed -n \
    's/.*webhook -> confirmed *\([0-9]*\) events\/s; time to confirm p50 \([0-9]*\) ms, p99 \([0-9]*\) ms.*/\1 \2 \3/p' \
    "$work/service.log")
  n=$("${psql[@]}" -d postgres -t -A -c "SELECT count(*) FROM demo.payment_events")
  svc[${name}_events]=$n
  per_event() { awk -v ms="$1" -v n="$n" 'BEGIN {printf "%.0f", ms * 1000 / n}'; }
  local c m x deliveries
  read -r c m x < <(usage "$logs/intake.log")
  svc[${name}_intake]=$(per_event "$c") svc[${name}_intake_rss]=$((m / 1024))
  deliveries=$(grep -c '"msg":"webhook"' "$logs/intake.log" || true)  # (none: grep says 0, exits 1)
  svc[${name}_intake_switches]=$(awk -v x="$x" -v d="$deliveries" 'BEGIN {printf "%.2f", d ? x / d : 0}')
  read -r c m _ < <(usage "$logs"/worker?.log)
  svc[${name}_workers]=$(per_event "$c") svc[${name}_worker_rss]=$((m / 1024))
  read -r c m _ < <(usage "$logs"/relay?.log "$logs/mock.log")
  svc[${name}_relay]=$(per_event "$c")
  c=$(sed -n 's/^provider: own usage: cpu_ms \([0-9]*\),.*/\1/p' "$work/service.log")
  svc[${name}_provider]=$(per_event "$c")
  svc[${name}_server]=$(per_event $((pg_after - pg_before)))
  # The server's share by whose sessions they were (application_name); the
  # rest is setup, the provider's checks, the admin commands, background work.
  session_ms() { awk -v n="$1" '$1 == n {print $2}' "$work/sessions"; }
  svc[${name}_server_intake]=$(per_event "$(session_ms webhook_intake)")
  svc[${name}_server_workers]=$(per_event "$(session_ms outbox_worker)")
  svc[${name}_server_relays]=$(per_event "$(session_ms notification_relay)")
  # Where a delivery's time goes (means): a sender's cycle (senders over
  # deliveries/s while intake answers: gaps of a second or more between two
  # answers, the mix's pause between its rounds, left out), its wait for its
  # group commit to start and that commit's record (intake's histograms),
  # and, per group commit, intake's sessions' CPU and their wait for a core
  # (the run queue, schedstat; -1 where the kernel keeps none).
  local prom=$logs/intake.prom span batches
  prom_mean() { # NAME [SCALE]: NAME's _sum / _count, times SCALE
    awk -v k="$1" -v x="${2:-1}" '$1 == k "_sum" {s = $2} $1 == k "_count" {c = $2}
      END {printf "%.2f", c ? s / c * x : 0}' "$prom"
  }
  # Each answer's time of day (UTC) in seconds, in the log's order: read for
  # the cycle's span here and for the machine's intervals below.
  grep '"msg":"webhook"' "$logs/intake.log" | sed -n 's/.*"ts":"[^T]*T\([0-9:.]*\).*/\1/p' |
    awk -F: '{printf "%.6f\n", $1 * 3600 + $2 * 60 + $3}' >"$work/answers"
  span=$(awk '{d = $1 - p; if (d < 0) d += 86400; if (NR > 1 && d < 1) s += d; p = $1} END {printf "%.3f", s}' \
    "$work/answers")
  svc[${name}_cycle_ms]=$(awk -v s="${SIM_CONCURRENCY:-16}" -v t="$span" -v d="$deliveries" \
    'BEGIN {printf "%.2f", d ? s * t * 1000 / d : 0}')
  svc[${name}_batch]=$(prom_mean idemledger_intake_batch_deliveries)
  svc[${name}_gather_ms]=$(prom_mean idemledger_intake_batch_wait_seconds 1000)
  svc[${name}_record_ms]=$(prom_mean idemledger_intake_batch_record_seconds 1000)
  svc[${name}_rest_ms]=$(awk -v c="${svc[${name}_cycle_ms]}" -v g="${svc[${name}_gather_ms]}" \
    -v r="${svc[${name}_record_ms]}" 'BEGIN {printf "%.2f", c - g - r}')
  batches=$(awk '$1 == "idemledger_intake_batch_deliveries_count" {print $2}' "$prom")
  session_wait() { awk -v n="$1" '$1 == n {print $3}' "$work/sessions"; }
  per_batch() { awk -v ms="$1" -v b="$batches" 'BEGIN {printf "%.2f", ms < 0 ? -1 : (b ? ms / b : 0)}'; }
  svc[${name}_record_cpu_ms]=$(per_batch "$(session_ms webhook_intake)")
  svc[${name}_record_runq_ms]=$(per_batch "$(session_wait webhook_intake)")
  svc[${name}_intake_runq_us]=$(awk -v ms="$(session_wait process:webhook_intake)" -v d="$deliveries" \
    'BEGIN {printf "%.0f", ms < 0 ? -1 : (d ? ms * 1000 / d : 0)}')
  # The whole machine while intake answered: busy, idle with nothing to run,
  # idle waiting on the disk, % of its cores' time, over the intervals between
  # two /proc/stat samples (DEMO_MACHINE_STAT) that lie between the first
  # answer and the last and hold one at least (the mix's pause left out); -1
  # if no interval does.
  read -r svc[${name}_busy_pct] svc[${name}_idle_pct] svc[${name}_iowait_pct] < <(
    sort -n "$work/answers" |
      awk 'FNR == NR {answer[++n] = $1; next}
        '"$jiffies_awk"' {m++; t[m] = $NF % 86400; b[m] = busy; a[m] = all; w[m] = io}
        END {
          for (j = 1; j < m; j++) {
            while (k < n && answer[k + 1] < t[j]) k++
            if (k < n && answer[k + 1] <= t[j + 1] && t[j] >= answer[1] && t[j + 1] <= answer[n]) {
              B += b[j + 1] - b[j]; A += a[j + 1] - a[j]; W += w[j + 1] - w[j]
            }
          }
          if (A > 0) printf "%d %d %d\n", 100 * B / A, 100 * (A - B - W) / A, 100 * W / A
          else print "-1 -1 -1"
        }' - "$work/machine")
  cp "$work/service.log" "$results/service_$name.log"
}
echo "service: webhook_intake + 2 outbox_worker processes, ${SIM_EVENTS:=10000} events, deposits only, then the demo's mix" >&2
# Deposits only, no notifications: what the bare loop does, behind HTTP and the queue.
run_service deposits SIM_DEPOSITS_ONLY=1 DEMO_RELAYS=0
# The same with each claim committed before its apply (two commits per claim,
# as before run_once() claimed and applied in one transaction).
run_service apart SIM_DEPOSITS_ONLY=1 DEMO_RELAYS=0 IDEMLEDGER_APPLY_WITH_CLAIM=0
# The same with both threads of each worker always claiming (4 claimers on
# these 2 cores), as before the second became a spare (claimers.hpp).
run_service all_claim SIM_DEPOSITS_ONLY=1 DEMO_RELAYS=0 IDEMLEDGER_SPARE_AFTER_MS=0
# The demo as README command 1 runs it: every kind of event, notifications
# relayed to the mock API through its 6 s outage, all on these 2 cores.
run_service mix
run_service mix_all_claim IDEMLEDGER_SPARE_AFTER_MS=0
# The service beside the bare loop, in turns. The service runs above come
# minutes after the bare loop's triples, and this host's speed drifts by a
# third within a quarter of an hour, so a ratio across them measures the host
# as much as the service. SERVICE_TRIPLES (default 3) triples each run the bare
# loop (a fresh populated state, as in its triples), the service deposits only
# with the benchmark's 16 senders, and the same with 64, back to back, the
# order turned each triple; each triple's two ratios are taken inside it. The
# bare runs go into the results as "turn_bare" (ledger_load, above), a name no
# table reads; each triple takes the last.
for ((turn = 1; turn <= SERVICE_TRIPLES; turn++)); do
  order=(bare s16 s64 bare s16)
  for w in "${order[@]:$(((turn - 1) % 3)):3}"; do
    case $w in
      bare) ledger_load turn_bare ;;
      s16) run_service "turn16_$turn" SIM_DEPOSITS_ONLY=1 DEMO_RELAYS=0 ;;
      s64) SIM_CONCURRENCY=64 run_service "turn64_$turn" SIM_DEPOSITS_ONLY=1 DEMO_RELAYS=0 ;;
    esac
  done
  awk -v b="$(awk '$1 == "turn_bare" {t = $2} END {print t}' "$work/results")" \
    -v a="${svc[turn16_${turn}_tps]}" -v c="${svc[turn64_${turn}_tps]}" \
    -v p="${svc[turn16_${turn}_p99]}" -v q="${svc[turn64_${turn}_p99]}" \
    'BEGIN {printf "%d %d %d %.2fx %.2fx %d %d\n", b, a, c, a / b, c / b, p, q}' >>"$work/turns"
done
printf '\nService end to end (same server, same run; %s events, each delivered 1-3 times over HTTP by 16 senders;\n' "$SIM_EVENTS"
printf 'intake and 2 workers, the mix also 2 relays and the mock API; all of it and the provider on this machine)\n'
printf '%-40s %10s %9s %9s\n' workload "events/s" "p50 ms" "p99 ms"
printf '%-40s %10s %9s %9s\n' "webhook -> confirmed, deposits only" "${svc[deposits_tps]}" "${svc[deposits_p50]}" "${svc[deposits_p99]}"
printf '%-40s %10s %9s %9s\n' "  ... the claim committed first" "${svc[apart_tps]}" "${svc[apart_p50]}" "${svc[apart_p99]}"
printf '%-40s %10s %9s %9s\n' "  ... every worker thread claiming" "${svc[all_claim_tps]}" "${svc[all_claim_p50]}" "${svc[all_claim_p99]}"
printf '%-40s %10s %9s %9s\n' "webhook -> confirmed, demo mix + relays" "${svc[mix_tps]}" "${svc[mix_p50]}" "${svc[mix_p99]}"
printf '%-40s %10s %9s %9s\n' "  ... every worker thread claiming" "${svc[mix_all_claim_tps]}" "${svc[mix_all_claim_p50]}" "${svc[mix_all_claim_p99]}"
printf '%-40s %10s\n' "bare process_deposit (above)" "${tps[idemledger]}"
printf '%-40s %10s\n' "service (deposits) / bare's triples" "$(ratio "${svc[deposits_tps]}" "${tps[idemledger]}")"
printf '%-40s %10s %10s\n' "  claim and apply in one commit / apart" "$(ratio "${svc[deposits_tps]}" "${svc[apart_tps]}")" \
  "server µs ${svc[deposits_server]} / ${svc[apart_server]}"
printf '%-40s %10s %10s\n' "  a spare thread / both claiming" "$(ratio "${svc[deposits_tps]}" "${svc[all_claim_tps]}")" \
  "server µs ${svc[deposits_server]} / ${svc[all_claim_server]}"
# turn_spread COLUMN: "median (min-max)" of one column over the service's triples.
turn_spread() {
  local m lo hi
  read -r m lo hi _ < <(spread "$work/turns" "$1")
  printf '%s (%s-%s)' "$m" "$lo" "$hi"
}
printf '\nThe service beside the bare loop, in turns (%s triples of: the bare loop, %s clients, %ss; the service,\n' \
  "$SERVICE_TRIPLES" "$clients" "$seconds"
printf 'deposits only, 16 senders; the same, 64 senders; back to back, the order turned each triple): median (min-max)\n'
printf '%-40s %s\n' "bare process_deposit, deposits/s" "$(turn_spread 1)"
printf '%-40s %s\n' "service, 16 senders, events/s" "$(turn_spread 2)"
printf '%-40s %s\n' "service, 64 senders, events/s" "$(turn_spread 3)"
printf '%-40s %s\n' "service / bare, 16 senders, in a triple" "$(turn_spread 4)"
printf '%-40s %s\n' "service / bare, 64 senders, in a triple" "$(turn_spread 5)"
printf '%-40s %s\n' "time to confirm p99 ms, 16 / 64 senders" "$(turn_spread 6) / $(turn_spread 7)"
cp "$work/turns" "$results/service_turns.txt"

# The ceiling, from the figures measured above. Its first line is what the
# service cannot avoid on these cores: the load generator runs here, and every
# event is applied at least as the bare loop applies it; no service on this
# machine can pass it, whatever its intake and queue cost. The next lines add
# the service's own costs as measured, to show which of them takes it down.
printf '\nThe ceiling on these 2 cores (2 cores of CPU / the CPU an event needs; the bare loop measured over %ss inside a run)\n' "$bare_window"
printf '%-40s %10s\n' "bare loop: deposits/s, machine busy" "$bare_tps, ${bare_busy}%"
printf '%-40s %10s\n' "bare loop: server CPU µs per deposit" "$bare_server"
printf '%-40s %10s\n' "bare loop: driver, machine µs per deposit" "$bare_client, $bare_machine"
printf '%-40s %10s %10s\n' "an event needs at least (µs)" "events/s" "/ bare"
ceiling() { printf '%-40s %10s %10s\n' "$1" "$((2000000 / $2))" "$(ratio $((2000000 / $2)) "${tps[idemledger]}")"; }
ceiling "provider + the bare's server work" $((svc[deposits_provider] + bare_server))
ceiling "  ... + intake and workers as measured" \
  $((svc[deposits_provider] + bare_server + svc[deposits_intake] + svc[deposits_workers]))
ceiling "  ... + the server's work in its sessions" \
  $((svc[deposits_provider] + svc[deposits_server_intake] + svc[deposits_server_workers] + svc[deposits_intake] \
    + svc[deposits_workers]))
ceiling "provider + queue floor server work, g=6" $((svc[deposits_provider] + qf[g6_server]))
ceiling "  ... + intake and workers as measured" \
  $((svc[deposits_provider] + qf[g6_server] + svc[deposits_intake] + svc[deposits_workers]))
ceiling "provider + own-schema floor's, g=6" $((svc[deposits_provider] + qf[own_g6_server]))
ceiling "  ... + intake and workers as measured" \
  $((svc[deposits_provider] + qf[own_g6_server] + svc[deposits_intake] + svc[deposits_workers]))
printf '%-40s %10s %10s\n' "measured: webhook -> confirmed" "${svc[deposits_tps]}" "$(ratio "${svc[deposits_tps]}" "${tps[idemledger]}")"
# The same two runs as the machine saw them: a rate is the machine's busy
# share x 2 cores / its µs per event, so the service's ratio to the bare loop
# is (the bare's µs per deposit / the service's per event) x (the service's
# busy share / the bare's). The service's µs: its busy share while intake
# answered x 2 cores / its rate (none if no sample fell inside its answers).
if ((svc[deposits_busy_pct] > 0)); then
  svc_machine=$((svc[deposits_busy_pct] * 20000 / svc[deposits_tps]))
  printf '%-40s %10s\n' "service: machine busy, µs per event" "${svc[deposits_busy_pct]}%, $svc_machine"
  printf '%-40s %10s\n' "  / bare (window) = µs x busy ratios" "$(awk -v mb="$bare_machine" -v ms="$svc_machine" \
    -v bb="$bare_busy" -v bs="${svc[deposits_busy_pct]}" 'BEGIN {printf "%.2f x %.2f = %.2fx", mb / ms, bs / bb, mb / ms * bs / bb}')"
fi

printf '\nThe queued path'"'"'s floor (pgbench, bench/queue_floor.sql, %s clients: each event recorded twice, then claimed\n' "$clients"
printf 'and applied set-based, g events per statement, on the reference schema; what PostgreSQL itself needs for the queue;\n'
printf '"own schema": bench/queue_floor_own.sql, the same on idemledger'"'"'s schema, writing what the service writes)\n'
printf '%-40s %10s %10s %10s %10s\n' workload "events/s" "/ floor" "/ bare" "server µs"
for w in g3 g6 g6_together own_g4 own_g6; do
  printf '%-40s %10s %10s %10s %10s\n' "${qf[${w}_label]}" "${qf[${w}_tps]}" "$(ratio "${qf[${w}_tps]}" "${tps[one_statement]}")" \
    "$(ratio "${qf[${w}_tps]}" "${tps[idemledger]}")" "${qf[${w}_server]}"
done
printf '%-40s %10s %10s %10s %10s\n' "the service (deposits only, above)" "${svc[deposits_tps]}" \
  "$(ratio "${svc[deposits_tps]}" "${tps[one_statement]}")" "$(ratio "${svc[deposits_tps]}" "${tps[idemledger]}")" "${svc[deposits_server]}"
printf '%-40s %10s %10s %10s %10s\n' "bare process_deposit (above)" "${tps[idemledger]}" \
  "$(ratio "${tps[idemledger]}" "${tps[one_statement]}")" "1.00x" "$bare_server"
printf '\nWhere the service spends CPU, µs per event recorded (the whole run: setup and checks included)\n'
printf '%-40s %10s %10s\n' component deposits mix
for k in intake workers relay provider server; do
  case $k in
    intake) label="webhook_intake" ;;
    workers) label="2 outbox_workers" ;;
    relay) label="2 relays + mock API" ;;
    provider) label="provider simulator (HMAC, HTTP client)" ;;
    server) label="PostgreSQL (every backend)" ;;
  esac
  printf '%-40s %10s %10s\n' "$label" "${svc[deposits_$k]}" "${svc[mix_$k]}"
done
printf '%-40s %10s %10s\n' "  ... in webhook_intake's sessions" "${svc[deposits_server_intake]}" "${svc[mix_server_intake]}"
printf '%-40s %10s %10s\n' "  ... in the outbox_workers' sessions" "${svc[deposits_server_workers]}" "${svc[mix_server_workers]}"
printf '%-40s %10s %10s\n' "  ... in the relays' sessions" "${svc[deposits_server_relays]}" "${svc[mix_server_relays]}"
printf '%-40s %10s %10s\n' "sum" \
  "$((svc[deposits_intake] + svc[deposits_workers] + svc[deposits_relay] + svc[deposits_provider] + svc[deposits_server]))" \
  "$((svc[mix_intake] + svc[mix_workers] + svc[mix_relay] + svc[mix_provider] + svc[mix_server]))"
printf '%-40s %10s %10s\n' "2 cores at the measured rate" \
  "$((2000000 / svc[deposits_tps]))" "$((2000000 / svc[mix_tps]))"
printf '%-40s %10s %10s\n' "webhook_intake context switches/delivery" "${svc[deposits_intake_switches]}" \
  "${svc[mix_intake_switches]}"
printf '%-40s %10s %10s\n' "peak RSS MiB: webhook_intake" "${svc[deposits_intake_rss]}" "${svc[mix_intake_rss]}"
printf '%-40s %10s %10s\n' "peak RSS MiB: an outbox_worker" "${svc[deposits_worker_rss]}" "${svc[mix_worker_rss]}"

# A sender waits for each answer, and each 200 waits for its group commit:
# the rate is senders / cycle. What the cycle is made of, in the same runs.
printf '\nWhere a delivery'"'"'s time goes, ms (means over the run; each of %s senders waits for its answer)\n' "${SIM_CONCURRENCY:-16}"
printf '%-52s %10s %10s\n' step deposits mix
lat() { printf '%-52s %10s %10s\n' "$1" "${svc[deposits_$2]}" "${svc[mix_$2]}"; }
lat "a sender's cycle: senders / deliveries per second" cycle_ms
lat "  in intake, waiting for its group commit to start" gather_ms
lat "  in intake, its group commit (a round trip, commit)" record_ms
lat "  ... deliveries in one group commit" batch
lat "  ... its session's CPU per group commit" record_cpu_ms
lat "  ... its session's wait for a core per group commit" record_runq_ms
lat "  the rest: provider, HTTP both ways, checks" rest_ms
lat "intake's threads' wait for a core, µs per delivery" intake_runq_us
lat "the machine while intake answers: busy, % of its cores" busy_pct
lat "  ... idle, nothing to run, %" idle_pct
lat "  ... idle, waiting on the disk, %" iowait_pct

# The queue alone: DRAIN_EVENTS deposits recorded as intake records them
# (pending), then 2 outbox_workers start (as in the service runs) and drain
# them; events/s from the workers' start until every one is confirmed. No
# HTTP, no provider: the worker path's own ceiling beside the bare loop's.
drain_rates=()
for round in 1 2 3; do
  "${psql[@]}" -d postgres -c "DROP SCHEMA IF EXISTS demo CASCADE" >/dev/null 2>&1
  IDEMLEDGER_DSN="$IDEMLEDGER_TEST_DSN" IDEMLEDGER_SCHEMA=demo IDEMLEDGER_WEBHOOK_SECRET=unused \
    build/examples/provider_simulator/provider_simulator setup >/dev/null
  "${psql[@]}" -d postgres -c "INSERT INTO demo.payment_events (event_id, user_id, amount, event_type, status, asset)
        SELECT 'b' || g, 1 + g % 200, 1.5, 'deposit', 'pending', 'ETH' FROM generate_series(1, ${DRAIN_EVENTS:=20000}) g" \
    -c "VACUUM ANALYZE demo.payment_events" -c "CHECKPOINT" >/dev/null
  drain_pids=()
  t0=$(date +%s%N)
  for w in 1 2; do
    IDEMLEDGER_DSN="$IDEMLEDGER_TEST_DSN" IDEMLEDGER_SCHEMA=demo IDEMLEDGER_METRICS_PORT=0 \
      IDEMLEDGER_DLQ_SPOOL="$work/drain$w.spool" IDEMLEDGER_DLQ_SPOOL_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n') \
      build/examples/outbox_worker/outbox_worker >"$work/drain$w.log" 2>&1 &
    drain_pids+=($!)
  done
  poll_until_zero "SELECT count(*) FROM demo.payment_events WHERE status <> 'confirmed'" 0.05 12000 \
    || { echo "run_load.sh: the backlog was not drained in 10 minutes" >&2; exit 1; }
  t1=$(date +%s%N)
  kill -TERM "${drain_pids[@]}" && wait "${drain_pids[@]}" 2>/dev/null || true
  drain_rates+=("$((DRAIN_EVENTS * 1000000000 / (t1 - t0)))")
done
drain=$(printf '%s\n' "${drain_rates[@]}" | median)
printf '\nBacklog drain (the queue alone: %s deposits recorded, then 2 outbox_workers; start to the last confirmed)\n' "$DRAIN_EVENTS"
printf '%-40s %10s\n' "drain, events/s (median of 3)" "$drain"
printf '%-40s %10s\n' "  rounds" "${drain_rates[*]}"
printf '%-40s %10s\n' "drain / bare process_deposit" "$(ratio "$drain" "${tps[idemledger]}")"

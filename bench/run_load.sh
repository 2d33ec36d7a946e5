#!/usr/bin/env bash
# run_load.sh [CLIENTS=4] [SECONDS=20] [ROUNDS=1]
#
# End-to-end deposit throughput, side by side on ONE private PostgreSQL in ONE
# run: idemledger's process_deposit (bench/ledger_load) against pgbench with
# the reference scripts in bench/reference/ — the seed's 13-statement deposit
# and the one-statement floor — and pgbench's built-in simple-update. Same
# client count, same duration, populated start state, prepared protocol.
# Prints deposits/s, p50/p99 latency (median over rounds) and the ratios;
# then the same deposit workload and the floor at 16 clients (deposits of one
# asset to 10,000 different users: with a row every deposit wrote — a stored
# system balance — idemledger would stop scaling where the floor does not),
# batches (process_batch, 100 deposits per call; and mixed: 30% withdrawals,
# 10% replays) per event against the seed and the single loop, two-phase
# withdrawals (hold, then post: two transactions) per second,
# and the driver's own CPU per operation (getrusage; pgbench's is not ours).
# Then, on the same server, the whole service (webhook_intake + 2 outbox_worker
# processes, 16 provider senders, SIM_EVENTS events): webhook -> confirmed
# events/s and time-to-confirm, next to the bare process_deposit figure.
# In the first round it also runs the three deposit workloads at 1 client and
# the seed at 16, and then draws build/bench-results/throughput_vs_clients.svg
# and latency.svg with gnuplot (scripts/plot.sh), beside the data they show.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-4} seconds=${2:-20} rounds=${3:-1}

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
  turns=(idemledger batch100 batch100_mixed idemledger_metrics idemledger_partitioned hold_post)
  for ((k = 0; k < ${#turns[@]}; k++)); do
    case ${turns[(k + round - 1) % ${#turns[@]}]} in
      idemledger) ledger_load idemledger --latency-log "$results/latency_idemledger.txt" ;;
      batch100) ledger_load batch100 --batch 100 ;;
      batch100_mixed) ledger_load batch100_mixed --batch 100 --mixed ;;
      idemledger_metrics) ledger_load idemledger_metrics --metrics ;;
      idemledger_partitioned) ledger_load idemledger_partitioned --partitioned ;;
      hold_post) ledger_load hold_post --workload hold_post ;;
    esac
  done
  clients=16 ledger_load idemledger_c16
  reset_seed
  run_pgbench seed_sequence seedref -f "$ref/seed_sequence.sql"
  reset_seed
  run_pgbench one_statement seedref -f "$ref/one_statement.sql"
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
  fi
done

# Median of each column per workload, then the table.
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A tps p50 p99 cpu
workloads=(idemledger idemledger_metrics idemledger_partitioned seed_sequence one_statement simple_update)
for w in "${workloads[@]}" batch100 batch100_mixed hold_post idemledger_c16 one_statement_c16 idemledger_c1 \
  one_statement_c1 seed_sequence_c1 seed_sequence_c16; do
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

printf '\nTwo-phase withdrawals, %s clients (hold amount + fee, then post it: two transactions each)\n' "$clients"
printf '%-40s %10s %9s %9s\n' workload "pairs/s" "p50 µs" "p99 µs"
printf '%-40s %10s %9s %9s\n' "hold + post" "${tps[hold_post]}" "${p50[hold_post]}" "${p99[hold_post]}"
printf '%-40s %10s\n' "steps/s (two per pair)" "$((tps[hold_post] * 2))"
printf '%-40s %10s\n' "deposits/s (above)" "${tps[idemledger]}"

printf '\nClient CPU per operation (the driver process: user + system over the timed loop / operations)\n'
printf '%-40s %10s\n' workload "CPU µs"
printf '%-40s %10s\n' "process_deposit, 1 client" "${cpu[idemledger_c1]}"
printf '%-40s %10s\n' "process_deposit, $clients clients" "${cpu[idemledger]}"
printf '%-40s %10s\n' "process_deposit, 16 clients" "${cpu[idemledger_c16]}"
printf '%-40s %10s\n' "  ... recording LedgerMetrics" "${cpu[idemledger_metrics]}"
printf '%-40s %10s\n' "hold + post (per pair)" "${cpu[hold_post]}"
printf '%-40s %10s\n' "process_batch of 100 (per event)" "${cpu[batch100]}"
printf '%-40s %10s\n' "  ... mixed (per event)" "${cpu[batch100_mixed]}"

echo "service: webhook_intake + 2 outbox_worker processes, ${SIM_EVENTS:=10000} events" >&2
SIM_EVENTS=$SIM_EVENTS bash scripts/demo-services.sh >"$work/service.log" 2>&1 || { cat "$work/service.log" >&2; exit 1; }
service=$(sed -n 's/.*webhook -> confirmed *\([0-9]*\) events\/s; time to confirm p50 \([0-9]*\) ms, p99 \([0-9]*\) ms.*/\1 \2 \3/p' "$work/service.log")
read -r svc_tps svc_p50 svc_p99 <<<"$service"
printf '\nService end to end (same server, same run; %s events, each delivered 1-3 times over HTTP)\n' "$SIM_EVENTS"
printf '%-40s %10s %9s %9s\n' workload "events/s" "p50 ms" "p99 ms"
printf '%-40s %10s %9s %9s\n' "webhook -> confirmed (2 workers)" "$svc_tps" "$svc_p50" "$svc_p99"
printf '%-40s %10s\n' "bare process_deposit (above)" "${tps[idemledger]}"
printf '%-40s %10s\n' "service / bare" "$(ratio "$svc_tps" "${tps[idemledger]}")"

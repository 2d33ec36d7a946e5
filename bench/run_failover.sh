#!/usr/bin/env bash
# run_failover.sh [CLIENTS=4] [SECONDS=20] [ROUNDS=2]
#
# What a synchronous standby costs, in one run on this machine: process_deposit
# (bench/ledger_load) and the service (scripts/demo-services.sh, deposits only:
# webhook_intake + 2 outbox_worker processes, the provider's 16 senders)
# against a single private PostgreSQL and against the replicated cluster of
# scripts/cluster.sh — the primary waits for its standby to confirm every
# commit (synchronous_commit = on; pg_auto_failover sets
# synchronous_standby_names) — taking turns, medians over ROUNDS. Both on the
# same 2 cores: the cluster's standby and monitor share them with the primary
# and the clients, where a real standby has a machine of its own, so the
# cluster's figures here are a lower bound.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${1:-4} seconds=${2:-20} rounds=${3:-2}

if [[ -z "${IDEMLEDGER_CLUSTER_DIR:-}" ]]; then
  bash scripts/build.sh build
  exec bash scripts/with-postgres.sh build/bench-pg \
    bash scripts/with-cluster.sh build/bench-cluster bash "$0" "$clients" "$seconds" "$rounds"
fi

single="host=$IDEMLEDGER_PG_SOCKET port=$IDEMLEDGER_PG_PORT dbname=postgres user=postgres"
cluster=$IDEMLEDGER_CLUSTER_DSN
results=build/bench-results
mkdir -p "$results"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
: >"$work/results"

# deposits NAME DSN: one ledger_load run, appends "NAME tps p50_us p99_us".
deposits() {
  build/bench/ledger_load --dsn "$2" --clients "$clients" --seconds "$seconds" \
    | awk -v name="$1" '/^RESULT/ {for (i = 1; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}
                                    print name, v["tps"], v["p50_us"], v["p99_us"]}' >>"$work/results"
}
# service NAME DSN: the service once on a fresh schema, appends "NAME events/s p50_ms p99_ms".
service() {
  psql -X -q -d "$2" -c "DROP SCHEMA IF EXISTS demo CASCADE" >/dev/null 2>&1
  env IDEMLEDGER_TEST_DSN="$2" SIM_EVENTS="${SIM_EVENTS:-10000}" SIM_DEPOSITS_ONLY=1 DEMO_RELAYS=0 \
    bash scripts/demo-services.sh >"$work/service.log" 2>&1 || { cat "$work/service.log" >&2; exit 1; }
  sed -n "s/.*webhook -> confirmed *\([0-9]*\) events\/s; time to confirm p50 \([0-9]*\) ms, p99 \([0-9]*\) ms.*/$1 \1 \2 \3/p" \
    "$work/service.log" >>"$work/results"
}

for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds: $clients clients x ${seconds}s, then the service; single server and cluster take turns" >&2
  if ((round % 2 == 1)); then
    deposits single "$single"; deposits cluster "$cluster"
    service service_single "$single"; service service_cluster "$cluster"
  else
    deposits cluster "$cluster"; deposits single "$single"
    service service_cluster "$cluster"; service service_single "$single"
  fi
done

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
col() { awk -v w="$1" -v c="$2" '$1==w {print $c}' "$work/results" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2fx", a / b}'; }
printf '\nA synchronous standby, %s clients, %ss per workload, %s round(s), one run (median)\n' "$clients" "$seconds" "$rounds"
printf '%-44s %10s %10s %10s %10s\n' workload "single" "cluster" "cluster/1" "p99 c/1"
printf '%-44s %10s %10s %10s %10s\n' "process_deposit, deposits/s" "$(col single 2)" "$(col cluster 2)" \
  "$(ratio "$(col cluster 2)" "$(col single 2)")" "$(ratio "$(col cluster 4)" "$(col single 4)")"
printf '%-44s %10s %10s %10s %10s\n' "service webhook -> confirmed, events/s" "$(col service_single 2)" \
  "$(col service_cluster 2)" "$(ratio "$(col service_cluster 2)" "$(col service_single 2)")" \
  "$(ratio "$(col service_cluster 4)" "$(col service_single 4)")"
printf '%-44s %10s %10s\n' "service time to confirm p99, ms" "$(col service_single 4)" "$(col service_cluster 4)"
cp "$work/results" "$results/failover_bench.txt"

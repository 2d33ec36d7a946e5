#!/usr/bin/env bash
# run_scale.sh [ROWS=10000000] [BASE=100000] [CLIENTS=4] [SECONDS=20] [ROUNDS=3]
#
# Does a deposit cost the same on a big ledger? On ONE private PostgreSQL
# (fsync on), two schemas set up by bench/ledger_load like the reference
# start state, one with BASE historical deposits and one with ROWS — each
# deposit as the ledger writes it: an event row, an idempotency record, the
# user's ledger entry and the chain's opposite entry, so ROWS of each — then,
# side by side in the same run, process_deposit (single calls) and
# process_batch (100 per call) at CLIENTS clients on each, the two schemas
# taking turns at going first. Prints deposits/s and the big/base ratio
# (median over rounds, every round beside it; target >= 0.85), then a full
# reconciliation
# (idemledger-admin reconcile --full) of each: wall time, peak RSS, verdict.
# Beside them, the same comparison for the yardstick: pgbench's one-statement
# floor (bench/reference/one_statement.sql) on two databases of the reference
# schema holding BASE and ROWS historical deposits whose keys are drawn as the
# floor draws its own ('e' || random), so its new keys land among the old ones
# as they would after ROWS of its own deposits. That row says what PostgreSQL
# itself keeps of a random-keyed ledger's rate at that size on this server.
# The big schema's load time and size on disk come first. Figures also go to
# build/bench-results/scale.txt. Server settings for the run:
# IDEMLEDGER_PG_OPTS (scripts/with-postgres.sh), e.g. "-c shared_buffers=4GB".
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-10000000} base=${2:-100000} clients=${3:-4} seconds=${4:-20} rounds=${5:-3}
for n in "$rows" "$base" "$clients" "$seconds" "$rounds"; do
  [[ "$n" =~ ^[1-9][0-9]{0,8}$ ]] || { echo "run_scale.sh: arguments are integers in [1, 999999999], got '$n'" >&2; exit 2; }
done

if [[ -z "${IDEMLEDGER_PG_PORT:-}" ]]; then
  bash scripts/build.sh build
  exec bash scripts/with-postgres.sh build/scale-pg bash "$0" "$rows" "$base" "$clients" "$seconds" "$rounds"
fi

results=build/bench-results
mkdir -p "$results"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
psql=(psql -X -q -t -A -v ON_ERROR_STOP=1 -h "$IDEMLEDGER_PG_SOCKET" -p "$IDEMLEDGER_PG_PORT" -U postgres -d postgres)
load=build/bench/ledger_load
admin=build/tools/idemledger-admin/idemledger-admin

# Loading writes GBs: checkpoints spaced out for the load, as an operator's
# bulk import would; back to the defaults before anything is measured.
"${psql[@]}" -c "ALTER SYSTEM SET max_wal_size = '8GB'" -c "SELECT pg_reload_conf()" >/dev/null
for s in base:"$base" big:"$rows"; do
  name=scale_${s%%:*} n=${s#*:}
  t0=$(date +%s.%N)
  "$load" --dsn "$IDEMLEDGER_TEST_DSN" --schema "$name" --history "$n" --clients 1 --seconds 1 >/dev/null
  t1=$(date +%s.%N)
  size=$("${psql[@]}" -c "SELECT pg_size_pretty(sum(pg_total_relation_size(c.oid))) FROM pg_class c
                          WHERE c.relnamespace = '$name'::regnamespace AND c.relkind IN ('r', 'p')")
  echo "loaded $name: $n historical deposits in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", b - a}') s, $size on disk" | tee -a "$work/head" >&2
done
# The yardstick's two databases: the reference schema and its start state, but
# history keys drawn like the floor's own, inserted in key order (C collation)
# so every index is built by appending.
pgbench=$(command -v pgbench || echo "$IDEMLEDGER_PG_BIN/pgbench")
for s in base:"$base" big:"$rows"; do
  db=floor_${s%%:*} n=${s#*:}
  t0=$(date +%s.%N)
  "${psql[@]}" -c "CREATE DATABASE $db"
  "${psql[@]}" -d "$db" -f bench/reference/seed_schema.sql >/dev/null 2>&1
  "${psql[@]}" -d "$db" -v n="$n" >/dev/null <<'SQL'
CREATE UNLOGGED TABLE hist AS
  SELECT DISTINCT ON (k) k, g FROM
    (SELECT 'e' || (1 + (random() * 8.99e18)::bigint)::text COLLATE "C" AS k, g
       FROM generate_series(1, :n) AS g) r
  ORDER BY k;
INSERT INTO payment_events (event_id, user_id, amount, event_type, status, retry_count, created_at, updated_at)
  SELECT k, 1 + g % 10000, (1 + g % 1000000) / 100.0, 'deposit', 'confirmed', 0,
         now() - interval '1 day', now() - interval '1 day' FROM hist ORDER BY k;
INSERT INTO processed_events (idempotency_key, outcome, created_at)
  SELECT 'deposit-' || k, 'success', now() - interval '1 day' FROM hist ORDER BY k;
INSERT INTO balance_events (user_id, amount, event_type, source_event_id, created_at)
  SELECT 1 + g % 10000, (1 + g % 1000000) / 100.0, 'deposit', k, now() - interval '1 day' FROM hist ORDER BY k;
UPDATE users u SET balance = s.total
  FROM (SELECT user_id, sum(amount) AS total FROM balance_events GROUP BY user_id) s WHERE s.user_id = u.id;
DROP TABLE hist;
VACUUM ANALYZE;
SQL
  t1=$(date +%s.%N)
  echo "loaded $db (the floor's reference schema): $n historical deposits in $(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.0f", b - a}') s" | tee -a "$work/head" >&2
done
"${psql[@]}" -c "ALTER SYSTEM RESET max_wal_size" -c "SELECT pg_reload_conf()" -c "CHECKPOINT" >/dev/null

wal() { "${psql[@]}" -c "SELECT wal_fpi || ' ' || wal_bytes FROM pg_stat_wal"; }
# measure NAME SCHEMA FLAGS...: one ledger_load run on a loaded schema; appends
# "NAME tps cpu_us fpi_per_event wal_bytes_per_event" (pg_stat_wal around the run).
measure() {
  local name=$1 schema=$2 before after
  shift 2
  before=$(wal)
  "$load" --dsn "$IDEMLEDGER_TEST_DSN" --schema "$schema" --reuse --clients "$clients" --seconds "$seconds" "$@" >"$work/run"
  after=$(wal)
  awk -v name="$name" -v before="$before" -v after="$after" '/^RESULT/ {
        for (i = 1; i <= NF; i++) {split($i, kv, "="); v[kv[1]] = kv[2]}
        split(before, b, " "); split(after, a, " ")
        printf "%s %s %s %.2f %.0f\n", name, v["tps"], v["cpu_us"], (a[1] - b[1]) / v["deposits"], (a[2] - b[2]) / v["deposits"]
      }' "$work/run" >>"$work/results"
}
# measure_floor NAME DB: one pgbench run of the floor; appends the same fields
# (no CPU figure: pgbench's own is not the ledger's).
measure_floor() {
  local name=$1 db=$2 before after
  before=$(wal)
  "$pgbench" -n -M prepared -c "$clients" -j 2 -T "$seconds" -h "$IDEMLEDGER_PG_SOCKET" -p "$IDEMLEDGER_PG_PORT" \
    -U postgres -f bench/reference/one_statement.sql "$db" >"$work/run" 2>&1
  after=$(wal)
  awk -v name="$name" -v before="$before" -v after="$after" '
      /^number of transactions actually processed/ {n = $NF; sub(/\/.*/, "", n)}
      /^tps = / {tps = $3}
      END {
        split(before, b, " "); split(after, a, " ")
        printf "%s %.0f - %.2f %.0f\n", name, tps, (a[1] - b[1]) / n, (a[2] - b[2]) / n
      }' "$work/run" >>"$work/results"
}
for round in $(seq 1 "$rounds"); do
  echo "round $round/$rounds: $clients clients x ${seconds}s per workload" >&2
  order=(base big)
  ((round % 2 == 0)) && order=(big base)
  for s in "${order[@]}"; do measure "single_$s" "scale_$s"; done
  for s in "${order[@]}"; do measure "batch_$s" "scale_$s" --batch 100; done
  for s in "${order[@]}"; do measure_floor "floor_$s" "floor_$s"; done
done

# median NAME COLUMN: the median over the rounds (the mean of the middle two
# for an even count); rounds NAME: every round's figure, in run order.
median() {
  awk -v n="$1" -v col="$2" '$1 == n {print $col}' "$work/results" | sort -n \
    | awk '{a[NR] = $1} END {if (NR % 2) print a[(NR + 1) / 2]; else printf "%.0f\n", (a[NR / 2] + a[NR / 2 + 1]) / 2}'
}
rounds_of() { awk -v n="$1" '$1 == n {printf "%s%s", sep, $2; sep = " "}' "$work/results"; }
reconcile() {
  /usr/bin/time -f "%e %M" -o "$work/time" "$admin" --dsn "$IDEMLEDGER_TEST_DSN" --schema "$1" --quiet \
    reconcile --full >"$work/reconcile" 2>/dev/null || true
  read -r wall rss <"$work/time"
  printf '  %-26s %10s s %10s MiB   %s\n' "reconcile --full $1" "$wall" "$((rss / 1024))" "$(head -n 1 "$work/reconcile")"
}
{
  echo
  echo "scale: $rows vs $base historical deposits, $clients clients, ${seconds}s per workload, median of $rounds rounds ($(date -u +%FT%TZ))"
  cat "$work/head"
  printf '  %-22s %10s %10s %8s %9s %15s %17s   %s\n' workload "base ev/s" "big ev/s" "big/base" "cpu µs/ev" \
    "FPI/ev base|big" "WAL B/ev base|big" "rounds: base | big"
  for w in single batch floor; do
    b=$(median "${w}_base" 2) g=$(median "${w}_big" 2) cpu=$(median "${w}_big" 3)
    [[ $w == floor ]] && cpu=-
    printf '  %-22s %10s %10s %8s %9s %15s %17s   %s | %s\n' \
      "$(case $w in batch) echo 'batch (100/call)' ;; floor) echo 'floor (pgbench)' ;; *) echo "$w" ;; esac)" "$b" "$g" \
      "$(awk -v g="$g" -v b="$b" 'BEGIN {printf "%.2f", g / b}')" "$cpu" \
      "$(median "${w}_base" 4)|$(median "${w}_big" 4)" "$(median "${w}_base" 5)|$(median "${w}_big" 5)" \
      "$(rounds_of "${w}_base")" "$(rounds_of "${w}_big")"
  done
  reconcile scale_base
  reconcile scale_big
} | tee -a "$results/scale.txt"

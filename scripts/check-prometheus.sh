#!/usr/bin/env bash
# check-prometheus.sh — the rules of deploy/prometheus/ as Prometheus loads
# them: `promtool check rules`, then `promtool test rules` (each alert's unit
# tests), and every alert the rules define must be tested at least once.
set -euo pipefail
dir=$(cd "$(dirname "$0")/../deploy/prometheus" && pwd)
rules=$dir/idemledger.rules.yml tests=$dir/idemledger.rules.test.yml
promtool check rules "$rules"
(cd "$dir" && promtool test rules "$(basename "$tests")")
untested=()
while read -r alert; do
  grep -qE "alertname: $alert\$" "$tests" || untested+=("$alert")
done < <(sed -n 's/^ *- alert: *\([A-Za-z0-9_]*\) *$/\1/p' "$rules")
if ((${#untested[@]})); then
  echo "check-prometheus: alerts without a test in $(basename "$tests"): ${untested[*]}" >&2
  exit 1
fi
echo "check-prometheus: $(grep -c '^ *- alert:' "$rules") alerts, $(grep -c '^ *- record:' "$rules") recording rules, every alert tested"

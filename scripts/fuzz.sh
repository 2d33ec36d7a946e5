#!/usr/bin/env bash
# fuzz.sh [SECONDS=60] — builds the libFuzzer targets (clang, ASan+UBSan, the
# library instrumented too) and runs each for SECONDS from its committed seed
# corpus (fuzz/corpus/<target>, read only; new inputs go to build-fuzz/corpus),
# two at a time (one per core: each still gets SECONDS of its own core).
# Prints runs, executions/s, coverage and corpus size per target; exits
# non-zero on any crash, leak or broken property, keeping the input.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
bash scripts/install-deps.sh clang libclang-rt-14-dev
cmake -S . -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DIDEMLEDGER_FUZZ=ON -DIDEMLEDGER_BUILD_TESTS=OFF -DIDEMLEDGER_BUILD_EXAMPLES=OFF \
  -DIDEMLEDGER_BUILD_BENCH=OFF -DIDEMLEDGER_BUILD_TOOLS=OFF -DIDEMLEDGER_INSTALL=OFF >/dev/null
targets=(amount_parse key_encoding webhook http_request)
cmake --build build-fuzz -j2 --target "${targets[@]/%/_fuzz}"

fuzz_one() {
  local t=$1
  mkdir -p "build-fuzz/corpus/$t" build-fuzz/crashes
  if build-fuzz/fuzz/${t}_fuzz "build-fuzz/corpus/$t" "fuzz/corpus/$t" -max_total_time="$seconds" \
       -max_len=512 -print_final_stats=1 -artifact_prefix="build-fuzz/crashes/$t-" \
       >"build-fuzz/$t.log" 2>&1; then
    echo ok >"build-fuzz/$t.result"
  else
    echo failed >"build-fuzz/$t.result"
  fi
}
for ((i = 0; i < ${#targets[@]}; i += 2)); do
  fuzz_one "${targets[i]}" &
  if ((i + 1 < ${#targets[@]})); then fuzz_one "${targets[i + 1]}" & fi
  wait
done

printf '\n%-14s %12s %10s %8s %8s %8s  %s\n' target runs "execs/s" cov ft corpus result
status=0
for t in "${targets[@]}"; do
  log=build-fuzz/$t.log
  if [[ $(cat "build-fuzz/$t.result" 2>/dev/null) == ok ]]; then
    result=ok
  else
    result="FAILED (see $log)"
    status=1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  read -r cov ft corpus < <(grep -E '^#[0-9]+' "$log" | tail -n 1 |
    sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+) corp: ([0-9]+).*/\1 \2 \3/')
  printf '%-14s %12s %10s %8s %8s %8s  %s\n' "$t" "${runs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corpus:-?}" "$result"
  [[ $result == ok ]] || grep -E 'ERROR|fuzz: |SUMMARY' "$log" | head -5 >&2
done
exit $status

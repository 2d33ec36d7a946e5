#!/usr/bin/env bash
# tsan-services.sh [BUILD_DIR=build-tsan-services] — the service binaries
# (webhook_intake, outbox_worker, notification_relay) under ThreadSanitizer,
# driven by the tests that start them as processes: the HTTP process tests
# (intake and workers under a thousand concurrent deliveries, relay replicas
# through an outage, finality), the attacks on their listeners, and a short
# chaos soak (2,000 events, 60 s of kills, 3 database restarts), where the
# services reconnect, restart and take over each other's leases.
#
# CI's TSan pass builds without the examples: GCC's -Wtsan refuses Asio's
# fences under -Werror, and the services would add minutes to a CI kept under
# 45. Here -Wno-tsan lets them build. The tests run once, directly connected,
# and every process's report is kept (log_path), the services' included: a
# service's report fails the test that started it only where the test checks
# the exit code, so any report in BUILD_DIR/tsan-reports fails this run. tests/tsan-suppressions.txt names
# the one blind spot left out (the uninstrumented libcpp-httplib).
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build-tsan-services}
bash scripts/install-deps.sh
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DIDEMLEDGER_TSAN=ON \
  -DIDEMLEDGER_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS=-Wno-tsan >/dev/null
cmake --build "$build_dir" -j2 --target idemledger_http_tests idemledger_security_tests \
  provider_simulator

reports=$(cd "$build_dir" && pwd)/tsan-reports
rm -rf "$reports"
mkdir -p "$reports"
export TSAN_OPTIONS="log_path=$reports/report suppressions=$PWD/tests/tsan-suppressions.txt"
tests_status=0
IDEMLEDGER_PG_OPTS="${IDEMLEDGER_PG_OPTS:--c fsync=off -c synchronous_commit=off}" \
  bash scripts/with-postgres.sh "$build_dir" bash -c \
  '"$1"/tests/idemledger_http_tests; a=$?; "$1"/tests/idemledger_security_tests; exit $((a || $?))' \
  _ "$build_dir" ||
  tests_status=$?
IDEMLEDGER_BUILD_DIR=$build_dir bash tests/chaos/run.sh 2000 60 3 >"$build_dir/tsan-chaos.log" 2>&1 ||
  { tests_status=$?; echo "tsan-services: the chaos soak failed ($build_dir/tsan-chaos.log)" >&2; }
grep -E '^chaos: stopped|^chaos soak' "$build_dir/tsan-chaos.log" || true

shopt -s nullglob
found=("$reports"/report.*)
if ((${#found[@]} > 0)); then
  echo "tsan-services: ${#found[@]} process(es) reported (${reports}):" >&2
  for f in "${found[@]}"; do
    printf '  %s: %s\n' "$(basename "$f")" "$(grep -m1 -h '^SUMMARY' "$f" || echo '(no summary)')" >&2
  done
  exit 1
fi
((tests_status == 0)) || { echo "tsan-services: tests failed (exit $tests_status)" >&2; exit 1; }
echo "tsan-services: every test passed and no process reported a race"

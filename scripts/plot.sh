#!/usr/bin/env bash
# plot.sh KIND ARGS... — the SVG charts of the benchmark and the soak, drawn by
# gnuplot (Debian's gnuplot-nox) from the data those scripts leave behind:
#
#   plot.sh throughput DATA.tsv OUT.svg               deposits/s by clients (bench/run_load.sh)
#   plot.sh latency OURS FLOOR SEED CLIENTS OUT.svg   latency by percentile (bench/run_load.sh)
#   plot.sh soak DIR T0 OUT.svg                       the chaos soak's timeline (tests/chaos/run.sh)
#
# A missing gnuplot is installed when we are root; otherwise the chart is
# skipped with a note (the figures in the tables do not depend on it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
plots=$root/bench/plots
if ! command -v gnuplot >/dev/null; then
  if [[ $(id -u) -eq 0 ]]; then
    bash "$root/scripts/install-deps.sh" gnuplot-nox
  else
    echo "plot: gnuplot is not installed (apt-get install gnuplot-nox); no chart" >&2
    exit 0
  fi
fi
kind=${1:?usage: plot.sh throughput|latency|soak ARGS...}
shift
case $kind in
  throughput) gnuplot -e "data='$1'; out='$2'" "$plots/throughput.gp" && out=$2 ;;
  latency) gnuplot -e "ours='$1'; floor='$2'; seed='$3'; clients=$4; out='$5'" "$plots/latency.gp" && out=$5 ;;
  soak) gnuplot -e "dir='$1'; t0=$2; out='$3'" "$plots/soak.gp" 2>&1 | { grep -v "Skipping data file with no valid points" || true; }
        out=$3 ;;
  *) echo "plot: unknown chart $kind" >&2; exit 2 ;;
esac
echo "plot: $out"

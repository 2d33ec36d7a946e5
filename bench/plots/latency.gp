# Latency by percentile: idemledger beside the two yardsticks, same clients.
# gnuplot -e "ours='a'; floor='b'; seed='c'; clients=4; out='latency.svg'" latency.gp
# Each file: one latency in µs per line, ascending (bench/run_load.sh sorts them).
set terminal svg size 760,440 dynamic font "sans,12" background rgb "white"
set output out
set title sprintf("Deposit latency by percentile, %d clients — same server, same run", clients)
set xlabel "percentile"
set ylabel "latency (ms)"
set logscale y
set xrange [0:100]
set xtics 10
set grid
set key top left
stats ours nooutput name "O"
stats floor nooutput name "F"
stats seed nooutput name "S"
# At most ~1,000 points a curve: the SVG stays small enough to keep in the docs.
step(n) = n > 1000 ? int(n / 1000) : 1
plot floor every step(F_records) using (100.0 * $0 / F_records):($1 / 1000.0) with lines lw 2 lc rgb "#999999" title "floor: one statement", \
     ours every step(O_records) using (100.0 * $0 / O_records):($1 / 1000.0) with lines lw 3 lc rgb "#1f77b4" title "idemledger process_deposit", \
     seed every step(S_records) using (100.0 * $0 / S_records):($1 / 1000.0) with lines lw 2 lc rgb "#d62728" title "seed: 13 statements"

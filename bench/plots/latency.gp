# Latency by percentile: idemledger beside the two yardsticks, same clients.
# gnuplot -e "ours='a'; floor='b'; seed='c'; clients=4; out='latency.svg'" latency.gp
# Each file: one latency in µs per line, ascending (bench/run_load.sh sorts them).
set terminal svg size 760,440 dynamic noenhanced font "sans,12" background rgb "white"
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
# At most ~1,000 points a curve: the SVG stays small enough to keep in the docs
# ($0 then counts the points drawn, each `step` records apart).
step(n) = n > 1000 ? int(n / 1000) : 1
sF = step(F_records)
sO = step(O_records)
sS = step(S_records)
plot floor every sF using (100.0 * $0 * sF / F_records):($1 / 1000.0) with lines lw 2 lc rgb "#999999" title "floor: one statement", \
     ours every sO using (100.0 * $0 * sO / O_records):($1 / 1000.0) with lines lw 3 lc rgb "#1f77b4" title "idemledger process_deposit", \
     seed every sS using (100.0 * $0 * sS / S_records):($1 / 1000.0) with lines lw 2 lc rgb "#d62728" title "seed: 13 statements"

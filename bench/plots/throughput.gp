# Deposits/s against client count: idemledger beside the two yardsticks.
# gnuplot -e "data='throughput.tsv'; out='throughput_vs_clients.svg'" throughput.gp
# data: "clients idemledger floor seed" per line (bench/run_load.sh writes it).
set terminal svg size 760,440 dynamic noenhanced font "sans,12" background rgb "white"
set output out
set title "Deposits per second by clients — one private PostgreSQL, fsync on, one run"
set xlabel "clients (connections)"
set ylabel "deposits/s"
set logscale x 2
set xtics (1, 2, 4, 8, 16, 32)
set xrange [0.8:20]
set yrange [0:*]
set grid
set key top left
plot data using 1:3 with linespoints lw 2 pt 5 lc rgb "#999999" title "floor: one data-modifying statement", \
     data using 1:2 with linespoints lw 3 pt 7 lc rgb "#1f77b4" title "idemledger process_deposit", \
     data using 1:4 with linespoints lw 2 pt 9 lc rgb "#d62728" title "seed: 13-statement deposit"

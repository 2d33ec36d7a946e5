# The chaos soak's timeline: events recorded and confirmed per second, with
# what was done to the system marked on it.
# gnuplot -e "dir='build/chaos-logs'; t0=1700000000; out='soak.svg'" soak.gp
# dir holds: recorded.tsv, confirmed.tsv ("epoch count" per second) and
# marks_<kind>.tsv ("epoch" per line) for kind in worker_kill worker_freeze relay_kill relay_freeze
# intake_kill api_outage db_restart db_crash db_failover db_partition (tests/chaos/run.sh
# writes them; a kind that did not happen is an empty file).
set terminal svg size 900,460 dynamic noenhanced font "sans,12" background rgb "white"
set output out
set title "Chaos soak: events per second while intake, workers, relays, sessions and the database are killed"
set xlabel "seconds since the start"
set ylabel "events/s"
set yrange [0:*]
set grid
set key below horizontal maxcols 4
set style data steps
stats dir."/confirmed.tsv" using 2 nooutput name "C"
stats dir."/recorded.tsv" using 2 nooutput name "R"
top = (C_max > R_max ? C_max : R_max) * 1.05
plot dir."/recorded.tsv" using ($1 - t0):2 lw 2 lc rgb "#999999" title "recorded by intake", \
     dir."/confirmed.tsv" using ($1 - t0):2 lw 3 lc rgb "#1f77b4" title "confirmed by workers", \
     dir."/marks_worker_kill.tsv" using ($1 - t0):(0):(0):(top * 0.05) with vectors nohead lw 1 lc rgb "#bbbbbb" title "worker SIGKILL", \
     dir."/marks_worker_freeze.tsv" using ($1 - t0):(top * 0.03):(5):(0) with vectors nohead lw 4 lc rgb "#bcbd22" title "worker frozen 5 s", \
     dir."/marks_relay_kill.tsv" using ($1 - t0):(0):(0):(top * 0.12) with vectors nohead lw 2 lc rgb "#ff7f0e" title "relay SIGKILL", \
     dir."/marks_relay_freeze.tsv" using ($1 - t0):(top * 0.09):(15):(0) with vectors nohead lw 4 lc rgb "#ffbb78" title "relay frozen 15 s", \
     dir."/marks_intake_kill.tsv" using ($1 - t0):(0):(0):(top * 0.2) with vectors nohead lw 2 lc rgb "#8c564b" title "intake SIGKILL", \
     dir."/marks_api_outage.tsv" using ($1 - t0):(0):(3):(0) with vectors nohead lw 6 lc rgb "#9467bd" title "downstream API 503 for 3 s", \
     dir."/marks_db_restart.tsv" using ($1 - t0):(0):(0):(top) with vectors nohead lw 2 dt 2 lc rgb "#2ca02c" title "database restart", \
     dir."/marks_db_crash.tsv" using ($1 - t0):(0):(0):(top) with vectors nohead lw 2 dt 2 lc rgb "#d62728" title "database crash (stop -m immediate)", \
     dir."/marks_db_failover.tsv" using ($1 - t0):(0):(0):(top) with vectors nohead lw 3 dt 3 lc rgb "#e377c2" title "failover (primary SIGKILLed)", \
     dir."/marks_db_partition.tsv" using ($1 - t0):(0):(12):(0) with vectors nohead lw 6 lc rgb "#17becf" title "database cut off for 12 s"

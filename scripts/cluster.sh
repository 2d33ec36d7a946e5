#!/usr/bin/env bash
# cluster.sh COMMAND DIR [ARGS...] — a replicated PostgreSQL on this machine.
#
# A primary and a synchronous standby kept by pg_auto_failover (Debian's
# postgresql-15-auto-failover: a monitor, and a keeper per node that the
# monitor drives through its state machine), all under DIR, as the
# unprivileged user "postgres" when run as root, on free ports on 127.0.0.1
# (sockets in /var/run/postgresql, never a system-wide cluster's port).
#
#   start DIR          create the monitor and node1, node2; wait until node1 is
#                      primary and node2 its synchronous standby; write
#                      DIR/cluster.env (the exports below)
#   stop DIR           stop every process of the cluster
#   state DIR          "node1=primary node2=secondary" (the monitor's view)
#   primary DIR        the node the monitor holds primary now
#   failover DIR       SIGKILL the primary's keeper and postgres (the machine
#                      died), wait until the standby accepts writes, print the
#                      seconds writes were refused as seen by a client, then
#                      start the old primary again to rejoin as standby
#                      (pg_rewind, by its keeper) in the background
#   wait-healthy DIR [S] wait until one primary and one standby (default 120 s)
#
# cluster.env exports:
#   IDEMLEDGER_TEST_DSN / IDEMLEDGER_CLUSTER_DSN  both nodes,
#                      target_session_attrs=read-write: the primary, wherever it is
#   IDEMLEDGER_CLUSTER_STANDBY_DSN  both nodes, target_session_attrs=prefer-standby
#   IDEMLEDGER_CLUSTER_DIR, IDEMLEDGER_CLUSTER_MONITOR_PORT
#
# Failover is tuned for tests (health checks every second, a node unhealthy
# after 2 s, the old primary given 3 s to demote): a failover takes 5-10 s
# here instead of ~30 s with the defaults.
set -euo pipefail
cmd=${1:?usage: cluster.sh start|stop|state|primary|failover|wait-healthy DIR}
dir=${2:?usage: cluster.sh COMMAND DIR}
dir=$(mkdir -p "$dir" && cd "$dir" && pwd)

pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
command -v pg_autoctl >/dev/null || {
  echo "cluster: pg_autoctl not found (apt-get install postgresql-15-auto-failover)" >&2
  exit 1
}
as_owner=()
if [[ $(id -u) -eq 0 ]]; then
  id -u postgres >/dev/null 2>&1 || useradd --system --user-group --home-dir /var/lib/postgresql postgres
  as_owner=(runuser -u postgres --)
fi
# pg_autoctl keeps its configuration and state under XDG directories: here,
# private to this cluster.
run() {
  "${as_owner[@]}" env HOME="$dir" XDG_CONFIG_HOME="$dir/config" XDG_DATA_HOME="$dir/share" \
    XDG_RUNTIME_DIR="$dir/run" PATH="$pg_bin:/usr/bin:/bin" "$@"
}
monitor_sql() {  # SQL...: each its own transaction (ALTER SYSTEM needs that)
  # shellcheck disable=SC1091
  source "$dir/cluster.env"
  local args=()
  for s in "$@"; do args+=(-c "$s"); done
  run psql -X -q -t -A -h 127.0.0.1 -p "$IDEMLEDGER_CLUSTER_MONITOR_PORT" -U postgres \
    -d pg_auto_failover "${args[@]}"
}
# keeper NODE: start NODE's pg_autoctl (and through it, its postgres) in a
# session of its own, so a failover can kill the whole machine's worth.
keeper() {
  setsid "${as_owner[@]}" env HOME="$dir" XDG_CONFIG_HOME="$dir/config" XDG_DATA_HOME="$dir/share" \
    XDG_RUNTIME_DIR="$dir/run" PATH="$pg_bin:/usr/bin:/bin" \
    pg_autoctl run --pgdata "$dir/$1" >>"$dir/$1.log" 2>&1 < /dev/null &
}
state() {
  monitor_sql "SELECT string_agg(nodename || '=' || reportedstate, ' ' ORDER BY nodename)
                 FROM pgautofailover.node"
}
wait_healthy() {
  local limit=${1:-120} s
  for _ in $(seq 1 $((limit * 4))); do
    s=$(state 2>/dev/null || true)
    [[ "$s" == "node1=primary node2=secondary" || "$s" == "node1=secondary node2=primary" ]] && return 0
    sleep 0.25
  done
  echo "cluster: not healthy after ${limit}s: $s" >&2
  return 1
}
# The process group of NODE's keeper (its postgres runs inside it).
group_of() {
  ps -eo pgid=,args= | awk -v d="$dir/$1" '$2 == "pg_autoctl" && $3 == "run" && $5 == d {print $1; exit}'
}

case $cmd in
  start)
    # shellcheck source=scripts/server-common.sh
    source "$(dirname "${BASH_SOURCE[0]}")/server-common.sh"
    rm -rf "${dir:?}"/{monitor,node1,node2,config,share,run} "$dir"/*.log
    mkdir -p "$dir/run"
    [[ $(id -u) -eq 0 ]] && chown -R postgres: "$dir"
    mkdir -p /var/run/postgresql && [[ $(id -u) -eq 0 ]] && chown postgres: /var/run/postgresql
    ports=$(pick_ports 3) || exit 1
    read -r mport p1 p2 <<<"$ports"
    common=(--pgctl "$pg_bin/pg_ctl" --hostname 127.0.0.1 --auth trust --no-ssl)
    run pg_autoctl create monitor "${common[@]}" --pgdata "$dir/monitor" --pgport "$mport" \
      >"$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; exit 1; }
    run pg_autoctl config set --pgdata "$dir/monitor" postgresql.listen_addresses 127.0.0.1 >/dev/null
    keeper monitor
    cat >"$dir/cluster.env" <<ENV
export IDEMLEDGER_CLUSTER_DIR="$dir" IDEMLEDGER_CLUSTER_MONITOR_PORT=$mport
export IDEMLEDGER_CLUSTER_DSN="host=127.0.0.1,127.0.0.1 port=$p1,$p2 dbname=postgres user=postgres target_session_attrs=read-write connect_timeout=2"
export IDEMLEDGER_CLUSTER_STANDBY_DSN="host=127.0.0.1,127.0.0.1 port=$p1,$p2 dbname=postgres user=postgres target_session_attrs=prefer-standby connect_timeout=2"
export IDEMLEDGER_TEST_DSN="\$IDEMLEDGER_CLUSTER_DSN"
ENV
    for _ in $(seq 1 120); do monitor_sql "SELECT 1" >/dev/null 2>&1 && break; sleep 0.25; done
    # Failover in seconds, not half a minute (see the top of this file).
    monitor_sql "ALTER SYSTEM SET pgautofailover.health_check_period = 1000" \
      "ALTER SYSTEM SET pgautofailover.health_check_timeout = 1000" \
      "ALTER SYSTEM SET pgautofailover.health_check_max_retries = 1" \
      "ALTER SYSTEM SET pgautofailover.health_check_retry_delay = 500" \
      "ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 2000" \
      "ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 3000" \
      "SELECT pg_reload_conf()" >/dev/null
    monitor="postgres://autoctl_node@127.0.0.1:$mport/pg_auto_failover?sslmode=disable"
    for n in 1 2; do
      port_var=p$n
      run pg_autoctl create postgres "${common[@]}" --pgdata "$dir/node$n" --pgport "${!port_var}" \
        --listen 127.0.0.1 --monitor "$monitor" --username postgres --dbname postgres --name "node$n" \
        >>"$dir/create.log" 2>&1 || { cat "$dir/create.log" >&2; exit 1; }
      keeper "node$n"
      [[ $n == 1 ]] && for _ in $(seq 1 240); do [[ $(state) == "node1=primary" || $(state) == "node1=single" ]] && break; sleep 0.25; done
    done
    wait_healthy 180
    echo "cluster: monitor :$mport, node1 :$p1 (primary), node2 :$p2 (synchronous standby) under $dir"
    ;;
  stop)
    for n in node1 node2 monitor; do
      g=$(group_of "$n" || true)
      [[ -n "$g" ]] && kill -TERM -- "-$g" 2>/dev/null || true
    done
    for _ in $(seq 1 60); do
      pgrep -f -- "$dir/" >/dev/null || exit 0
      sleep 0.25
    done
    pkill -KILL -f -- "$dir/" || true
    exit 0
    ;;
  state) state ;;
  primary) state | tr ' ' '\n' | sed -n 's/=primary$//p; s/=wait_primary$//p' ;;
  wait-healthy) wait_healthy "${3:-120}" ;;
  failover)
    # shellcheck disable=SC1091
    source "$dir/cluster.env"
    old=$(state | tr ' ' '\n' | sed -n 's/=primary$//p')
    [[ -n "$old" ]] || { echo "cluster: no primary to fail over from: $(state)" >&2; exit 1; }
    g=$(group_of "$old")
    start=$(date +%s%N)
    kill -KILL -- "-$g"
    [[ -f "$dir/$old/postmaster.pid" ]] && kill -KILL "$(head -n 1 "$dir/$old/postmaster.pid")" 2>/dev/null || true
    # A client's view: the first write that lands after the kill.
    for _ in $(seq 1 1200); do
      if run psql -X -q -t -A -d "$IDEMLEDGER_CLUSTER_DSN" \
        -c "CREATE TABLE IF NOT EXISTS public.failover_probe (at timestamptz); INSERT INTO public.failover_probe VALUES (now())" \
        >/dev/null 2>&1; then
        awk -v ns=$(($(date +%s%N) - start)) 'BEGIN {printf "%.1f\n", ns / 1e9}'
        # The machine comes back. Its postgres died mid-write, so pg_rewind
        # must first run crash recovery, in single-user mode, which refuses
        # to start once pg_autoctl has written standby.signal; pg_autoctl
        # then clones the whole node with pg_basebackup instead (a minute
        # here, hours for a large one). So the recovery runs first, here:
        # single-user mode opens no listener, nobody can write to it.
        run "$pg_bin/postgres" --single -F -D "$dir/$old" template1 </dev/null >>"$dir/$old.log" 2>&1 || true
        keeper "$old"  # rejoins as the standby, by pg_rewind
        exit 0
      fi
      sleep 0.1
    done
    echo "cluster: no writable primary 120 s after killing $old: $(state)" >&2
    exit 1
    ;;
  *) echo "cluster: unknown command $cmd" >&2; exit 2 ;;
esac

# shellcheck shell=bash
# server.sh — sourced by the benchmarks that measure the private server: its
# CPU, and waiting on it without costing it much. Needs IDEMLEDGER_PG_DATA
# (with-postgres.sh exports it) and a `psql` array that reaches the server.

# pg_cpu_ms: the CPU the private server has used so far, in ms: the
# postmaster's own and its reaped children's, plus each live child's.
pg_cpu_ms() {
  local pm hz
  pm=$(head -n 1 "$IDEMLEDGER_PG_DATA/postmaster.pid") hz=$(getconf CLK_TCK)
  { awk '{print $14 + $15 + $16 + $17}' "/proc/$pm/stat"
    for c in $(pgrep -P "$pm"); do awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || true; done
  } | awk -v hz="$hz" '{s += $1} END {printf "%d", s * 1000 / hz}'
}

# sessions_gone DB: waits until no other client session is on DB, and then for
# the postmaster to reap them. A backend's CPU reaches pg_cpu_ms through the
# postmaster only once reaped; read while it exits, its whole run is missed.
# Bounded: after 10 s it reads anyway (a pooler's idle session never leaves).
sessions_gone() {
  local tries=100
  # shellcheck disable=SC2154  # psql: the caller's
  until [[ $("${psql[@]}" -d postgres -t -A -c "SELECT count(*) FROM pg_stat_activity
             WHERE datname = '$1' AND backend_type = 'client backend' AND pid <> pg_backend_pid()") == 0 ]] \
    || ((--tries == 0)); do
    sleep 0.1
  done
  sleep 0.5
}

# poll_until_zero SQL INTERVAL TRIES: runs SQL (one count) every INTERVAL
# seconds until it answers 0 (status 0) or TRIES polls have passed (status 1),
# all through ONE session: a new session costs this server 5-7 ms of CPU,
# which polling with a session each time would add to what is measured.
poll_until_zero() {
  local answer=1 tries=$3 status=1
  coproc poller { "${psql[@]}" -d postgres -t -A; }
  while ((tries-- > 0)); do
    echo "$1;" >&"${poller[1]}"
    read -r answer <&"${poller[0]}"
    if ((answer == 0)); then
      status=0
      break
    fi
    sleep "$2"
  done
  echo '\q' >&"${poller[1]}"
  # shellcheck disable=SC2154  # coproc sets poller_PID
  wait "$poller_PID" 2>/dev/null || true
  return "$status"
}

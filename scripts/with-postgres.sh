#!/usr/bin/env bash
# with-postgres.sh DIR COMMAND [ARGS...]
#
# Starts a private PostgreSQL 15 with its data directory under DIR (never a
# system-wide cluster), as the unprivileged user "postgres" when run as root,
# listening on a free port on 127.0.0.1 and a unix socket in DIR. Runs COMMAND
# with IDEMLEDGER_TEST_DSN / IDEMLEDGER_PG_* exported and stops the server on
# exit, whatever COMMAND did. Extra server settings: IDEMLEDGER_PG_OPTS.
# In front of it, PgBouncer in transaction pooling mode: IDEMLEDGER_PGBOUNCER_DSN
# (3 server sessions shared by all clients, for the pooler-specific tests) and
# IDEMLEDGER_PGBOUNCER_SUITE_DSN (a larger pool, for the whole integration suite's
# second pass: its fork tests hold more transactions open at once).
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 DIR COMMAND [ARGS...]" >&2; exit 2; }
root_dir=$(mkdir -p "$1" && cd "$1" && pwd)/pg
shift

pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[[ -x "$pg_bin/initdb" ]] || { echo "with-postgres: no PostgreSQL server binaries found" >&2; exit 1; }

as_owner=()
cleanup_dir=""
if [[ $(id -u) -eq 0 ]]; then
  id -u postgres >/dev/null 2>&1 || useradd --system --user-group --home-dir /var/lib/postgresql postgres
  as_owner=(runuser -u postgres --)
fi

# shellcheck source=scripts/server-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/server-common.sh"

rm -rf "$root_dir"
mkdir -p "$root_dir"
private_dir_for "$root_dir" pg
if [[ -n $private_tmp_dir ]]; then
  rmdir "$root_dir"
  root_dir=$private_dir cleanup_dir=$private_tmp_dir
fi
mkdir -p "$root_dir/sock"
[[ $(id -u) -eq 0 ]] && chown -R postgres: "$root_dir"
chmod 755 "$root_dir"

"${as_owner[@]}" "$pg_bin/initdb" -D "$root_dir/data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >"$root_dir/initdb.log" 2>&1 \
  || { cat "$root_dir/initdb.log" >&2; exit 1; }

stop_server() {
  [[ -f "$root_dir/pgbouncer.pid" ]] && kill "$(cat "$root_dir/pgbouncer.pid")" 2>/dev/null
  "${as_owner[@]}" "$pg_bin/pg_ctl" -D "$root_dir/data" -m immediate -w stop >/dev/null 2>&1 || true
  [[ -n "${cleanup_dir:-}" ]] && rm -rf "$cleanup_dir"
  return 0
}
trap stop_server EXIT INT TERM

started=""
for attempt in 1 2 3 4 5; do
  port=$(pick_port) || exit 1
  # shellcheck disable=SC2086  # IDEMLEDGER_PG_OPTS is a list of -c settings
  if "${as_owner[@]}" "$pg_bin/pg_ctl" -D "$root_dir/data" -l "$root_dir/server.log" -w -t 60 \
    -o "-p $port -k $root_dir/sock -c listen_addresses=127.0.0.1 -c max_connections=200 ${IDEMLEDGER_PG_OPTS:-}" start >/dev/null; then
    started=1
    break
  fi
  grep -q "could not bind\|Address already in use" "$root_dir/server.log" || break
  echo "with-postgres: port $port was taken meanwhile (attempt $attempt); trying another" >&2
done
[[ -n "$started" ]] || { cat "$root_dir/server.log" >&2; exit 1; }
start_bouncer() {
  cat >"$root_dir/pgbouncer.ini" <<INI
[databases]
suite = host=$root_dir/sock port=$port dbname=postgres pool_size=40
* = host=$root_dir/sock port=$port
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $bouncer_port
unix_socket_dir = $root_dir/sock
auth_type = trust
auth_file = $root_dir/userlist.txt
pool_mode = transaction
default_pool_size = 3
max_client_conn = 200
logfile = $root_dir/pgbouncer.log
pidfile = $root_dir/pgbouncer.pid
INI
  [[ $(id -u) -eq 0 ]] && chown postgres: "$root_dir/pgbouncer.ini"
  "${as_owner[@]}" /usr/sbin/pgbouncer -q -d "$root_dir/pgbouncer.ini"
}
echo '"postgres" ""' >"$root_dir/userlist.txt"
[[ $(id -u) -eq 0 ]] && chown postgres: "$root_dir/userlist.txt"
bouncer_started=""
for attempt in 1 2 3 4 5; do
  bouncer_port=$(pick_port) || exit 1
  if start_bouncer; then bouncer_started=1; break; fi
done
[[ -n "$bouncer_started" ]] || { cat "$root_dir/pgbouncer.log" >&2; exit 1; }
export IDEMLEDGER_PGBOUNCER_DSN="host=$root_dir/sock port=$bouncer_port dbname=postgres user=postgres"
export IDEMLEDGER_PGBOUNCER_SUITE_DSN="host=$root_dir/sock port=$bouncer_port dbname=suite user=postgres"

export IDEMLEDGER_PG_BIN="$pg_bin" IDEMLEDGER_PG_DATA="$root_dir/data" IDEMLEDGER_PG_SOCKET="$root_dir/sock" IDEMLEDGER_PG_PORT="$port"
export IDEMLEDGER_PG_AS="${as_owner[*]}" IDEMLEDGER_PG_OPTS="${IDEMLEDGER_PG_OPTS:-}"
export IDEMLEDGER_TEST_DSN="host=$root_dir/sock port=$port dbname=postgres user=postgres"
echo "with-postgres: PostgreSQL on port $port, PgBouncer (transaction pooling) on $bouncer_port, socket $root_dir/sock (log: $root_dir/server.log)"
set +e
"$@"
status=$?
set -e
exit $status

#!/usr/bin/env bash
# with-cluster.sh DIR COMMAND [ARGS...]
#
# Starts the replicated PostgreSQL of scripts/cluster.sh under DIR (a primary,
# a synchronous standby, pg_auto_failover's monitor), runs COMMAND with
# DIR/cluster.env exported (IDEMLEDGER_TEST_DSN is the cluster's read-write
# DSN: both nodes, target_session_attrs=read-write), and stops the cluster on
# exit, whatever COMMAND did. COMMAND fails over with
# `bash scripts/cluster.sh failover "$IDEMLEDGER_CLUSTER_DIR"`.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 DIR COMMAND [ARGS...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mkdir -p "$1" && cd "$1" && pwd)
shift
cleanup_dir=""
if [[ $(id -u) -eq 0 ]] && id -u postgres >/dev/null 2>&1 && ! runuser -u postgres -- test -x "$dir"; then
  # A parent directory is closed to the servers' user (a clone under /root):
  # keep the cluster private in a temporary directory instead.
  dir=$(mktemp -d /tmp/idemledger-cluster.XXXXXX)
  cleanup_dir=$dir
fi
trap 'bash "$here/cluster.sh" stop "$dir"; [[ -z "$cleanup_dir" ]] || rm -rf "$cleanup_dir"' EXIT INT TERM
bash "$here/cluster.sh" start "$dir"
# shellcheck disable=SC1091
source "$dir/cluster.env"
set +e
"$@"
status=$?
set -e
exit $status

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
# shellcheck source=scripts/server-common.sh
source "$here/server-common.sh"
private_dir_for "$dir" cluster
dir=$private_dir cleanup_dir=$private_tmp_dir
trap 'bash "$here/cluster.sh" stop "$dir"; [[ -z "$cleanup_dir" ]] || rm -rf "$cleanup_dir"' EXIT INT TERM
bash "$here/cluster.sh" start "$dir"
# shellcheck disable=SC1091
source "$dir/cluster.env"
set +e
"$@"
status=$?
set -e
exit $status

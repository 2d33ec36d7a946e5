#!/usr/bin/env bash
# in_private_network.sh DIR COMMAND [ARGS...]
#
# Runs COMMAND in a network namespace of its own (only a loopback interface,
# brought up here) beside a private PostgreSQL started inside it by
# scripts/with-postgres.sh under DIR: a test may then take that loopback down
# (tests/pg/dead_network_test.cpp), or an address on it away (the chaos soak's
# partitions), without touching the machine's network. IDEMLEDGER_NETNS_ADDRESS
# (optional): one more address for that loopback, e.g. 10.77.0.1.
# Needs CAP_SYS_ADMIN for the namespace (root, as in CI).
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 DIR COMMAND [ARGS...]" >&2; exit 2; }
# The namespace it leaves, so what runs inside can tell it is not there.
IDEMLEDGER_OUTER_NETNS=$(stat -L -c %i /proc/self/ns/net)
export IDEMLEDGER_OUTER_NETNS
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck disable=SC2016  # expanded by the inner bash, inside the namespace
exec unshare --net -- bash -c 'ip link set lo up &&
  { [[ -z "${IDEMLEDGER_NETNS_ADDRESS:-}" ]] || ip addr add "$IDEMLEDGER_NETNS_ADDRESS/32" dev lo; } &&
  exec bash "$0" "$@"' "$here/../../scripts/with-postgres.sh" "$@"

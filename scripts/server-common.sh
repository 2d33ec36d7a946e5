# shellcheck shell=bash
# Sourced by the scripts that start private servers (with-postgres.sh,
# with-cluster.sh, cluster.sh): where their files go, and on which ports.

# private_dir_for DIR NAME — sets private_dir to DIR, or, when run as root and
# DIR is closed to the servers' user "postgres" (a clone under /root), to a new
# directory /tmp/idemledger-NAME.XXXXXX, also named in private_tmp_dir for the
# caller to remove on exit (private_tmp_dir is empty otherwise).
# shellcheck disable=SC2034  # both are read by the caller
private_dir_for() {
  private_dir=$1 private_tmp_dir=""
  if [[ $(id -u) -eq 0 ]] && id -u postgres >/dev/null 2>&1 && ! runuser -u postgres -- test -x "$1"; then
    private_dir=$(mktemp -d "/tmp/idemledger-$2.XXXXXX")
    private_tmp_dir=$private_dir
  fi
}

# Ports come from below the kernel's ephemeral range (ip_local_port_range):
# a port inside it can be taken at any moment by some client's outgoing
# connection, which is how "Address already in use" hit 2 starts in 10.
# Below it only listeners compete, and a lost race is retried on a new port.
read -r ephemeral_low _ </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || ephemeral_low=32768
port_floor=20000
((ephemeral_low - port_floor > 2000)) || port_floor=$((ephemeral_low > 12000 ? ephemeral_low - 2000 : 10000))
pick_port() {  # a port below the ephemeral range that nothing listens on
  local candidate
  for _ in $(seq 1 200); do
    candidate=$((port_floor + RANDOM % (ephemeral_low - port_floor)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$candidate") 2>/dev/null; then echo "$candidate"; return; fi
  done
  echo "no free port below $ephemeral_low" >&2
  return 1
}
pick_ports() {  # pick_ports N: N distinct ports as pick_port picks them, on one line
  local -a got=()
  local p
  while ((${#got[@]} < $1)); do
    p=$(pick_port) || return 1
    [[ " ${got[*]} " == *" $p "* ]] || got+=("$p")
  done
  echo "${got[*]}"
}

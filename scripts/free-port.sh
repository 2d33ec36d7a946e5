# Sourced by the scripts that start private servers (with-postgres.sh,
# with-cluster.sh).
#
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

# Shared by the cluster benches (cluster_placement.sh, cluster_cp.sh,
# cluster_dp.sh). Sourced after MT_CLUSTER_PREFIX is set.

# Bytes sent so far out of both nodes' veth ends (tc's counters).
link_bytes() {
  local n total=0
  for n in 0 1; do
    total=$((total + $(ip netns exec "$MT_CLUSTER_PREFIX-n$n" tc -s qdisc show dev mt0 | awk '/Sent/{print $2; exit}')))
  done
  echo "$total"
}

#!/usr/bin/env bash
# A cluster on one machine (docs/CLUSTER.md): each node a network namespace with
# its own hostname, all joined through veth pairs to a bridge that lives in a
# switch namespace of its own, each node's link shaped by a token bucket (tc
# tbf, both directions). Open MPI then runs across the nodes as across hosts:
# an rsh agent that enters a node's namespace instead of ssh-ing to it, TCP
# between nodes, shared memory inside one.
#
#   scripts/cluster.sh up NODES [--ranks-per-node R] [--link BW] [--cpus-per-node C]
#                                             BW as tc says it: 1gbit, 200mbit; C: cores of its own for
#                                             each node (node i: cores i·C … i·C + C − 1; 0, the default: all)
#   scripts/cluster.sh mpirun -np N ARGS...   mpirun from node 0 over the cluster
#   scripts/cluster.sh exec NODE CMD...       CMD inside node NODE (0-based), under its hostname
#   scripts/cluster.sh shape BW               re-shape every link on the fly
#   scripts/cluster.sh ping                   round-trip latency node 0 → node 1 (bounded)
#   scripts/cluster.sh down                   removes all of it
#
# Nothing is created in the root namespace: the addresses (10.231.0.0/24) exist
# only on the nodes' veth ends, and no namespace has a route off the machine.
# MT_CLUSTER_PREFIX (default mtc) names the namespaces; the state (host file,
# agent) lies in /tmp/<prefix>-cluster. `up` removes a previous run's leftovers first.
set -euo pipefail

prefix=${MT_CLUSTER_PREFIX:-mtc}
state=/tmp/$prefix-cluster
switch=$prefix-sw
if_node=mt0  # the node's end of its veth pair (btl_tcp_if_include)

die() {
  echo "cluster: $*" >&2
  exit 1
}

node_ns() { echo "$prefix-n$1"; }

# The namespaces this prefix owns, whatever a previous run left.
owned() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-(sw|n[0-9]+)$" || true; }

down() {
  local ns pids
  for ns in $(owned); do
    # Only processes inside our own namespaces: the ranks and daemons of a job on them.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true  # deleting a namespace deletes its veth ends and bridge
  done
  rm -rf "$state"
}

# tbf parameters for a rate: the bucket holds about 1 ms of traffic (at least
# 32 KiB, so that one full-size segment passes), the queue at most 50 ms.
shape_dev() {  # shape_dev NS DEV BW
  local bytes_per_s burst
  bytes_per_s=$(tc_rate_bytes "$3")
  burst=$((bytes_per_s / 1000))
  [ "$burst" -lt 32768 ] && burst=32768
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst "$burst" latency 50ms
}

tc_rate_bytes() {  # 1gbit → bytes per second (the suffixes tc takes for bits)
  local v=${1,,} mult=1
  case $v in
    *gbit) mult=1000000000; v=${v%gbit} ;;
    *mbit) mult=1000000; v=${v%mbit} ;;
    *kbit) mult=1000; v=${v%kbit} ;;
    *bit) v=${v%bit} ;;
    *) die "--link '$1': give a rate in bit, kbit, mbit or gbit (e.g. 1gbit)" ;;
  esac
  [[ $v =~ ^[0-9]+$ ]] || die "--link '$1': the rate must be a whole number of its unit"
  echo $((v * mult / 8))
}

shape_all() {  # shape_all BW: both directions of every node's link
  local n i
  n=$(cat "$state/nodes")
  for ((i = 0; i < n; i++)); do
    shape_dev "$(node_ns "$i")" "$if_node" "$1"
    shape_dev "$switch" "$prefix-p$i" "$1"
  done
  echo "$1" >"$state/link"
}

write_agent() {
  # Open MPI calls the agent as it would call ssh: `agent HOST COMMAND...`, the
  # command words to be run by a shell on HOST. HOST is a node's hostname,
  # which is its namespace's name.
  {
    echo '#!/usr/bin/env bash'
    echo "prefix=$prefix"
    cat <<'EOF'
host=$1
shift
case $host in
  "$prefix"-n[0-9]*) ;;
  *) echo "cluster agent: unknown host '$host'" >&2; exit 255 ;;
esac
# The node's own cores (up --cpus-per-node), else every core.
pin=()
[ -f "/tmp/$prefix-cluster/cpus-$host" ] && pin=(taskset -c "$(cat "/tmp/$prefix-cluster/cpus-$host")")
# As sshd would: the command words joined by spaces, run by a shell.
exec "${pin[@]}" ip netns exec "$host" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' "$host" "$*"
EOF
  } >"$state/agent"
  chmod +x "$state/agent"
}

# No IPv6 in our namespaces: the only addresses are the IPv4 ones up() gives
# the nodes (no link-local ones on the bridge ports either).
quiet_v6() {
  ip netns exec "$1" sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
}

up() {
  local nodes=$1 rpn=1 link=1gbit cpn=0 i ns
  shift
  [[ $nodes =~ ^[1-9][0-9]?$ ]] || die "NODES ($nodes) must be between 1 and 99"
  while [ $# -gt 0 ]; do
    case $1 in
      --ranks-per-node)
        rpn=$2
        shift 2
        ;;
      --link)
        link=$2
        shift 2
        ;;
      --cpus-per-node)
        cpn=$2
        shift 2
        ;;
      *) die "unknown option '$1' (up NODES [--ranks-per-node R] [--link BW] [--cpus-per-node C])" ;;
    esac
  done
  [[ $rpn =~ ^[1-9][0-9]*$ ]] || die "--ranks-per-node ($rpn) must be a positive integer"
  [[ $cpn =~ ^[0-9]+$ ]] && [ $((nodes * cpn)) -le "$(nproc)" ] ||
    die "--cpus-per-node ($cpn) x NODES ($nodes) must be at most this machine's $(nproc) cores"
  tc_rate_bytes "$link" >/dev/null
  command -v ip >/dev/null && command -v tc >/dev/null || die "ip and tc are missing: run scripts/install-deps.sh"
  down
  mkdir -p "$state"
  # A machine (a container) that forbids namespaces says so here; exit 77 is a skip.
  ip netns add "$switch" 2>"$state/err" || {
    echo "cluster: cannot create a network namespace: $(cat "$state/err")" >&2
    rm -rf "$state"
    exit 77
  }
  quiet_v6 "$switch"
  ip -n "$switch" link add br0 type bridge
  ip -n "$switch" link set br0 up
  : >"$state/hosts"
  for ((i = 0; i < nodes; i++)); do
    ns=$(node_ns "$i")
    ip netns add "$ns"
    quiet_v6 "$ns"
    ip -n "$ns" link set lo up
    ip -n "$ns" link add "$if_node" type veth peer name "$prefix-p$i" netns "$switch"
    ip -n "$ns" addr add "10.231.0.$((i + 1))/24" dev "$if_node"
    ip -n "$ns" link set "$if_node" up
    ip -n "$switch" link set "$prefix-p$i" master br0 up
    echo "$ns slots=$rpn" >>"$state/hosts"
    # Cores of its own: every process the node starts is pinned to them (taskset), so that a node's
    # ranks see its cores only (their threads = its cores / its ranks) and no two nodes share one.
    [ "$cpn" -eq 0 ] || echo "$((i * cpn))-$((i * cpn + cpn - 1))" >"$state/cpus-$ns"
  done
  echo "$nodes" >"$state/nodes"
  echo "$rpn" >"$state/ranks_per_node"
  shape_all "$link"
  write_agent
  echo "cluster: $nodes nodes ($(owned | grep -v -- -sw | sort -V | tr "\n" " ")), $rpn ranks each, links $link; host file $state/hosts"
}

in_node() {  # in_node I CMD...: CMD in node I's namespace under its hostname
  local ns
  ns=$(node_ns "$1")
  shift
  [ -f "$state/nodes" ] || die "no cluster is up (scripts/cluster.sh up NODES)"
  local pin=()
  [ -f "$state/cpus-$ns" ] && pin=(taskset -c "$(cat "$state/cpus-$ns")")
  exec "${pin[@]}" ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
}

cluster_mpirun() {
  [ -f "$state/nodes" ] || die "no cluster is up (scripts/cluster.sh up NODES)"
  # TCP between nodes, on the veth only; shared memory inside a node.
  in_node 0 mpirun --hostfile "$state/hosts" --allow-run-as-root --mca plm_rsh_agent "$state/agent" \
    --mca btl tcp,self,vader --mca btl_tcp_if_include "$if_node" --mca oob_tcp_if_include "$if_node" \
    -x OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" "$@"
}

ping_rtt() {
  # The stack's round trip over the bridge: 200 exchanges of 64 bytes over one
  # TCP connection node 1 → node 0 (TCP_NODELAY), bounded by a 20 s timeout.
  [ -f "$state/nodes" ] || die "no cluster is up"
  local port=47611
  timeout 20 ip netns exec "$(node_ns 1)" python3 -c '
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.231.0.2", int(sys.argv[1]))); s.listen(1); c, _ = s.accept()
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
for _ in range(200):
    m = b""
    while len(m) < 64: m += c.recv(64 - len(m))
    c.sendall(m)' "$port" &
  local server=$!
  timeout 20 ip netns exec "$(node_ns 0)" python3 -c '
import socket, statistics, sys, time
for _ in range(100):
    try:
        c = socket.create_connection(("10.231.0.2", int(sys.argv[1]))); break
    except OSError: time.sleep(0.05)
c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtt = []
for _ in range(200):
    t = time.perf_counter(); c.sendall(b"x" * 64); m = b""
    while len(m) < 64: m += c.recv(64 - len(m))
    rtt.append(time.perf_counter() - t)
print("round trip node 0 - node 1 (64 B over TCP, 200 times): min %.0f us, median %.0f us" % (
    min(rtt) * 1e6, statistics.median(rtt) * 1e6))' "$port"
  wait "$server"
}

case ${1:-} in
  up)
    shift
    [ $# -ge 1 ] || die "usage: up NODES [--ranks-per-node R] [--link BW] [--cpus-per-node C]"
    up "$@"
    ;;
  down) down ;;
  mpirun)
    shift
    cluster_mpirun "$@"
    ;;
  exec)
    shift
    in_node "$@"
    ;;
  shape)
    [ -f "$state/nodes" ] || die "no cluster is up"
    shape_all "$2"
    ;;
  ping) ping_rtt ;;
  *) die "usage: cluster.sh up NODES [--ranks-per-node R] [--link BW] [--cpus-per-node C] | mpirun ARGS | exec NODE CMD | shape BW | ping | down" ;;
esac

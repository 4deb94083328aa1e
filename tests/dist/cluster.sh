#!/usr/bin/env bash
# The tiny model on a cluster of 2 nodes × 2 ranks (scripts/cluster.sh: each
# node a network namespace with its own hostname, TCP over a veth link shaped
# to 1 Gbit/s between nodes, shared memory inside a node; docs/CLUSTER.md):
#   - dp 2 × tp 2 in the canonical mode (canonical_tp = 4), launched with
#     mpirun --map-by node so that mpirun's ranks alternate between the nodes,
#     is bitwise one process with the same 4 pieces (losses, gradient norms,
#     every tensor), and --print-mesh shows MPI's two nodes by name and each TP
#     group inside one node (the placement moved the ranks);
#   - the same launch with --placement ranks keeps mpirun's order, and the map
#     shows both TP groups across the nodes (the check above can fail);
#   - tp 2 × cp 2 (Ulysses) with --placement nodes:cp: the map shows each CP
#     group inside one node and both TP groups across, the ledger puts cp's
#     bytes (and the gradient's, dp x cp = cp) on the node link and tp's
#     across, within the derived bound;
#   - dp 2 × tp 2 in the default mode matches one process within the derived
#     bound (tests/dist/common.sh) and is not bitwise it;
#   - dp 4 with the hierarchical all-reduce (parallel.dp_allreduce, 2 dp ranks
#     in each node): bitwise one process in the canonical mode, the map shows
#     the groups it cuts at the nodes, and the ledger puts the reduce-scatter
#     and all-gather on the node link and half the gradient (1/g, g = 2) on the
#     link across — what a flat all-reduce sends over it whole; in the default
#     mode within the derived bound;
#   - calibrate across the 2 nodes, the link reshaped to 200 Mbit/s: the node's
#     ranks (2), the link's bandwidth (the shaped 25 MB/s: at most 5 % above,
#     what the token bucket's burst can add over 1 MiB messages; at least 0.75
#     of it, which a round trip timed as one way (0.5) would miss), and the
#     two ranks' flows sharing the node's one link.
# Exit 77 (CTest: skipped) where the machine does not allow network namespaces.
set -uo pipefail
bin=$1
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../../scripts/cluster.sh"
export MT_CLUSTER_PREFIX=mtct  # not the prefix a bench's cluster uses
tmp=$(mktemp -d)
trap 'bash "$cluster" down; rm -rf "$tmp"' EXIT
# shellcheck source=tests/dist/common.sh
source "$here/common.sh"

cluster_up 2 --ranks-per-node 2 --link 1gbit
cat "$tmp/up.log"

make_data
tiny+=(--set model.n_layers=4 --set train.microbatch_size=1)
canon=(--set parallel.reduction=canonical --set parallel.canonical_tp=4 --set model.n_kv_heads=4)

fail() {
  echo "FAIL $1"
  failures=$((failures + 1))
}
# on_cluster NAME MPIRUN_FLAGS -- TRAIN_FLAGS...: 4 ranks over the 2 nodes.
on_cluster() {
  local name=$1 mflags=()
  shift
  while [ "$1" != -- ]; do
    mflags+=("$1")
    shift
  done
  shift
  timeout 120 bash "$cluster" mpirun -np 4 "${mflags[@]}" "$bin" train "${tiny[@]}" "$@" \
    --metrics "$tmp/$name.jsonl" --save "$tmp/$name" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { fail "$name: the run failed: $(tail -3 "$tmp/$name.err")"; return 1; }
}

# bitwise NAME REF: NAME's run is REF's bit for bit (losses, gradient norms, every tensor, the file).
bitwise() {
  if "$bin" compare --rtol 0 --grad-norm-rtol 0 "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" \
    --model-b "$tmp/$2" >"$tmp/cmp" 2>&1 && cmp -s "$tmp/$1/model.safetensors" "$tmp/$2/model.safetensors"; then
    echo "ok   $1 on 2 nodes: bitwise one process"
  else
    fail "$1 on 2 nodes: differs from one process: $(tail -3 "$tmp/cmp")"
  fi
}

# The one-process references (not on the cluster: no MPI needed).
"$bin" train "${tiny[@]}" "${canon[@]}" --metrics "$tmp/ref_c4.jsonl" --save "$tmp/ref_c4" >/dev/null 2>&1 ||
  fail "ref_c4: the one-process run failed"
"$bin" train "${tiny[@]}" --metrics "$tmp/ref.jsonl" --save "$tmp/ref" >/dev/null 2>&1 ||
  fail "ref: the one-process run failed"

# Canonical, ranks alternating between nodes: the placement puts each TP group on one node.
if on_cluster canon_dp2_tp2 --map-by node -- --dp 2 --tp 2 --zero 1 "${canon[@]}" --print-mesh; then
  bitwise canon_dp2_tp2 ref_c4
  out="$tmp/canon_dp2_tp2.out"
  if grep -q '^nodes: 2 ' "$out" && grep -q '^  mtct-n0: mesh ranks 0 1 (mpirun.s ranks 0 2)$' "$out" &&
    grep -q '^  mtct-n1: mesh ranks 2 3 (mpirun.s ranks 1 3)$' "$out" &&
    grep -q '^TP groups: {0, 1} on mtct-n0; {2, 3} on mtct-n1 (each inside one node)$' "$out"; then
    echo "ok   --print-mesh: 2 nodes from MPI, each TP group inside one"
  else
    fail "--print-mesh does not show each TP group inside one node:"
    sed -n '/^nodes:/,$p' "$out"
  fi
fi

# The explicit order: mpirun's round robin kept, so TP crosses the link.
if on_cluster ranks_order --map-by node -- --dp 2 --tp 2 --set train.steps=1 --placement ranks --print-mesh; then
  if grep -q '^TP groups: {0, 1} on mtct-n0 + mtct-n1; {2, 3} on mtct-n0 + mtct-n1 (2 of 2 across nodes)$' \
    "$tmp/ranks_order.out"; then
    echo "ok   --placement ranks: both TP groups across the nodes, as mpirun placed them"
  else
    fail "--placement ranks: the map does not show TP across the nodes:"
    sed -n '/^nodes:/,$p' "$tmp/ranks_order.out"
  fi
fi

# The default mode: within the derived bound, and not bitwise.
if on_cluster dp2_tp2 -- --dp 2 --tp 2; then
  check dp2_tp2 ref
  if "$bin" compare --rtol 0 --grad-norm-rtol 0 "$tmp/dp2_tp2.jsonl" "$tmp/ref.jsonl" >/dev/null 2>&1 &&
    cmp -s "$tmp/dp2_tp2/model.safetensors" "$tmp/ref/model.safetensors"; then
    fail "dp2_tp2 (default mode) is bitwise one process: the bitwise check above would see nothing"
  else
    echo "ok   dp2_tp2 (default mode) is not bitwise one process"
  fi
fi
# nodes:cp: cp's all-to-all (Ulysses) inside the nodes, TP across; within the derived bound, and the
# ledger puts exactly the tp calls' bytes on the link across.
if on_cluster cp_inner --map-by node -- --tp 2 --cp 2 --set parallel.cp_impl=ulysses --placement nodes:cp \
  --print-mesh; then
  check cp_inner ref
  out="$tmp/cp_inner.out"
  if grep -q '^CP groups: {0, 2} on mtct-n0; {1, 3} on mtct-n1 (each inside one node)$' "$out" &&
    grep -q '^TP groups: {0, 1} on mtct-n0 + mtct-n1; {2, 3} on mtct-n0 + mtct-n1 (2 of 2 across nodes)$' "$out"; then
    echo "ok   --placement nodes:cp: each CP group inside one node, both TP groups across"
  else
    fail "--placement nodes:cp: the map does not show CP inside and TP across:"
    sed -n '/^nodes:/,$p' "$out"
  fi
  if python3 - "$tmp/cp_inner.jsonl" <<'PY'; then
import json, sys
r = [l for l in map(json.loads, open(sys.argv[1])) if l.get("rank") == 0 and l.get("step") == 1][0]
axis, link = r["comm_bytes_by_axis"], r["comm_bytes_by_link"]
print(f"bytes by axis {axis}, by link {link}")
# dp 1: the gradient's dp x cp group is the cp group, on the node as well.
inside = axis.get("cp", 0) + axis.get("dp+cp", 0)
sys.exit(0 if axis.get("cp", 0) > 0 and link.get("node") == inside and link.get("across") == sum(
    b for a, b in axis.items() if a not in ("cp", "dp+cp")) else 1)
PY
    echo "ok   the ledger: cp's all-to-alls and the gradient's sum over cp on the node link, tp's across"
  else
    fail "the ledger's bytes by link do not follow nodes:cp"
  fi
fi
# The hierarchical all-reduce: dp 4, 2 dp ranks per node.
hier=(--dp 4 --set parallel.dp_allreduce=hierarchical)
if on_cluster canon_dp4_hier --map-by node -- "${hier[@]}" "${canon[@]}" --print-mesh; then
  bitwise canon_dp4_hier ref_c4
  out="$tmp/canon_dp4_hier.out"
  if grep -q '^DP all-reduce: hierarchical$' "$out" &&
    grep -q '^  reduce-scatter, all-gather inside a node: {0, 1} on mtct-n0; {2, 3} on mtct-n1$' "$out" &&
    grep -q '^  all-reduce across the nodes: {0, 2}; {1, 3}$' "$out"; then
    echo "ok   --print-mesh: the dp group cut at the nodes"
  else
    fail "--print-mesh does not show the hierarchical all-reduce's groups:"
    sed -n '/^DP all-reduce/,+2p' "$out"
  fi
  # Rank 0's step 1: the gradient's bytes are the parameters' (ZeRO 0: every parameter on every rank;
  # the grad peak also holds the canonical mode's partial sums).
  if python3 - "$tmp/canon_dp4_hier.jsonl" <<'PY'; then
import json, sys
r = [l for l in map(json.loads, open(sys.argv[1])) if l.get("rank") == 0 and l.get("step") == 1][0]
grad, axis, link = r["mem_peak_by_kind"]["param"], r["comm_bytes_by_axis"], r["comm_bytes_by_link"]
across = axis.get("dp@across", 0)
ok = grad - 1024 <= 2 * across <= grad and link["across"] < grad / 2 + 1024 and link["node"] >= 1.5 * grad - 2048
print(f"grad {grad} B: all-reduce across {across} B, by link {link}")
sys.exit(0 if ok else 1)
PY
    echo "ok   the ledger: half the gradient across the link, the rest inside the nodes"
  else
    fail "the ledger's bytes by link are not the hierarchical all-reduce's"
  fi
fi
if on_cluster dp4_hier -- "${hier[@]}"; then
  check dp4_hier ref
fi
bash "$cluster" shape 200mbit >/dev/null
if timeout 120 bash "$cluster" mpirun -np 4 --bind-to none "$bin" calibrate --out "$tmp/machine.json" --seconds 0.02 \
  >"$tmp/cal.out" 2>&1; then
  if python3 - "$tmp/machine.json" <<'PY'; then
import json, sys
m = json.load(open(sys.argv[1]))
rate = 200e6 / 8
beta = m["inter"]["bytes_per_s"]
print(f"calibrate: {m['devices_per_node']} ranks a node, link {beta / 1e6:.2f} MB/s (shaped {rate / 1e6:.0f}), "
      f"alpha {m['inter']['alpha_s'] * 1e6:.1f} us, shared {m['shared_link']}")
sys.exit(0 if m["devices_per_node"] == 2 and 0.75 * rate <= beta <= 1.05 * rate and m["shared_link"] else 1)
PY
    echo "ok   calibrate: both levels measured, the link at its shaped rate and shared"
  else
    fail "calibrate across the nodes: not the shaped link"
  fi
else
  fail "calibrate across the nodes failed: $(tail -3 "$tmp/cal.out")"
fi
finish "cluster"

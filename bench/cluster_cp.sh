#!/usr/bin/env bash
# The four context-parallel attentions on two levels of links (docs/BENCHMARKS.md,
# "Context parallel on an emulated cluster"): 2 nodes × 2 ranks (scripts/cluster.sh,
# network namespaces), cp 4 over the 4 ranks (cp ranks 0, 1 on node 0 and 2, 3 on
# node 1), the link between the nodes shaped to each of LINKS in turn. Model:
# bench/cp/cp.toml with 4 kv heads (MHA; 4 heads of 64, 2 layers) and a vocabulary
# of 512 (so that the gradient all-reduce, 1.9 M floats, does not drown the
# attention's traffic), one sequence of T tokens a step. Per link, interleaved: ring (hops 1→2 and 3→0 cross the link),
# allgather, ulysses (each rank's all-to-all sends 2 of its 4 blocks across) and
# hybrid with cp_ulysses 2 (the all-to-all inside each node, the ring of two across).
# For each: the median step time (rank 0, steps after SKIP) and the bytes the link
# carried per step (tc's counters of both nodes' veth ends over the run, divided by
# the steps; includes the gradient all-reduce over dp+cp, the same in every run),
# beside rank 0's ledger bytes per step on the cp axes (cp, cp_a2a, cp_ring), and
# the planner's predicted step (`meshtrain plan --layout dp1,tp1,pp1,cp4,IMPL,…`;
# allgather is not modelled) on a machine file made as bench/cluster_placement.sh
# makes it: this node's calibration (2 ranks: compute, the intra-node collectives)
# and the link (calibrate's 1-rank-per-node latency, the shaped rate as its bandwidth).
#
#   bench/cluster_cp.sh [BUILD] [LINKS] [T] [STEPS]     defaults: build "1gbit 200mbit" 4096 5
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
links=${2:-1gbit 200mbit}
T=${3:-4096}
steps=${4:-5}
skip=2
bin=$(realpath "$here/$build/meshtrain")
cluster=$here/scripts/cluster.sh
export MT_CLUSTER_PREFIX=mtcc
tmp=$(mktemp -d)
trap 'bash "$cluster" down; rm -rf "$tmp"' EXIT
source "$here/tests/dist/common.sh" # make_data, mpi
cfg=$here/bench/cp/cp.toml
make_data
bash "$cluster" up 2 --ranks-per-node 2 --link "${links%% *}"
bash "$cluster" ping
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
# The model of the runs as a config of its own, for calibrate and plan.
mcfg=$tmp/cp_mha.toml
sed -e 's/^n_kv_heads = .*/n_kv_heads = 4/' -e 's/^vocab_size = .*/vocab_size = 512/' \
  -e "s/^max_seq_len = .*/max_seq_len = $T/" -e "s/^seq_len = .*/seq_len = $T/" "$cfg" >"$mcfg"
bash "$cluster" exec 0 "${mpi[@]}" --bind-to none -np 2 "$bin" calibrate --out "$tmp/node.json" --config "$mcfg" \
  --seconds 0.05 >/dev/null
bash "$cluster" mpirun -np 2 --host "$MT_CLUSTER_PREFIX-n0:1,$MT_CLUSTER_PREFIX-n1:1" --bind-to none "$bin" calibrate \
  --out "$tmp/link.json" --seconds 0.05 >/dev/null
python3 "$here/bench/cluster_machine.py" describe "$tmp/node.json" "$tmp/link.json"

source "$here/bench/cluster_common.sh" # link_bytes

printf '%-8s %-10s %15s %16s %22s %15s\n' link attention "step s (median)" "link MiB / step" "rank 0 cp ledger MiB" \
  "planner step s"
for link in $links; do
  bash "$cluster" shape "$link"
  python3 "$here/bench/cluster_machine.py" machine "$tmp/node.json" "$tmp/link.json" "$link" 2 "$tmp/machine.json"
  for impl in ring allgather ulysses hybrid; do
    extra=()
    [ "$impl" = hybrid ] && extra=(--set parallel.cp_ulysses=2)
    before=$(link_bytes)
    bash "$cluster" mpirun -np 4 --bind-to none "$bin" train --config "$cfg" --set data.dir="$tmp/data" \
      --set model.n_kv_heads=4 --set model.vocab_size=512 --set model.max_seq_len="$T" --set train.seq_len="$T" --set train.steps="$steps" \
      --set train.threads=1 --cp 4 --set parallel.cp_impl="$impl" "${extra[@]}" \
      --metrics "$tmp/$impl.$link.jsonl" >"$tmp/$impl.$link.out" 2>&1 || {
      echo "run $impl on $link failed:"
      tail -20 "$tmp/$impl.$link.out"
      exit 1
    }
    after=$(link_bytes)
    plan=none
    if [ "$impl" != allgather ]; then
      token=$impl
      [ "$impl" = hybrid ] && token=hybrid2
      "$bin" plan --config "$mcfg" --machine "$tmp/machine.json" --devices 4 --global-batch 1 --seq-len "$T" \
        --layout "dp1,tp1,pp1,cp4,$token,zero0,mbs1,recompute=none" --json "$tmp/$impl.$link.plan.json" >/dev/null
      plan=$tmp/$impl.$link.plan.json
    fi
    python3 - "$tmp/$impl.$link.jsonl" "$skip" "$link" "$impl" "$((after - before))" "$steps" "$plan" <<'EOF'
import json, statistics, sys
path, skip, link, impl, sent, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
plan = "-" if sys.argv[7] == "none" else f"{json.load(open(sys.argv[7]))['step_s']:.3f}"
lines = [json.loads(x) for x in open(path)]
times = [j["step_time_s"] for j in lines if "step_time_s" in j]
cp = [sum(v for k, v in j["comm_bytes_by_axis"].items() if k in ("cp", "cp_a2a", "cp_ring"))
      for j in lines if j.get("rank") == 0 and "comm_bytes_by_axis" in j]
print(f"{link:<8} {impl:<10} {statistics.median(times[skip:]):>15.3f} {sent / steps / 2**20:>16.2f}"
      f" {statistics.median(cp) / 2**20:>22.2f} {plan:>15}")
EOF
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"

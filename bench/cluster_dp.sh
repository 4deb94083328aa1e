#!/usr/bin/env bash
# The DP gradient all-reduce across an emulated cluster (docs/CLUSTER.md,
# "The hierarchical all-reduce"): 2 nodes × 4 ranks (scripts/cluster.sh), the
# link shaped to each of LINKS in turn. configs/plan/validate.toml at a global
# batch of 16, flat against hierarchical (parallel.dp_allreduce):
#   dp8_flat, dp8_hier          dp 8: 4 dp ranks per node (g = 4)
#   dp4_tp2_flat, dp4_tp2_hier  dp 4 × tp 2 placed (TP inside a node): 2 dp ranks per node (g = 2)
# For each: the median step time (rank 0, steps after the first), rank 0's
# ledger bytes of one step by link (inside the node / across), the bytes the
# link carried (tc's counters of both nodes' veth ends, whole run), beside the
# planner's predicted step and its dp term on the machine `meshtrain calibrate`
# measures across the cluster at that link speed (both levels: the first
# node's 4 ranks, and the link with whether a node's flows share it;
# docs/PLANNER.md, "Calibration").
#
#   bench/cluster_dp.sh [BUILD] [LINKS] [STEPS]     LINKS default: "1gbit 200mbit"
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
links=${2:-1gbit 200mbit}
steps=${3:-6}
bin=$(realpath "$here/$build/meshtrain")
cluster=$here/scripts/cluster.sh
export MT_CLUSTER_PREFIX=mtcd
tmp=$(mktemp -d)
trap 'bash "$cluster" down; rm -rf "$tmp"' EXIT
source "$here/tests/dist/common.sh" # make_data, mpi
cfg=$here/configs/plan/validate.toml
make_data
bash "$cluster" up 2 --ranks-per-node 4 --link "${links%% *}"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"


source "$here/bench/cluster_common.sh" # link_bytes

hier=--set\ parallel.dp_allreduce=hierarchical
# name layout :: train-flags
runs=(
  "dp8_flat dp8,tp1,pp1,cp1,zero0,mbs2 :: --dp 8"
  "dp8_hier dp8,tp1,pp1,cp1,zero0,mbs2,hier :: --dp 8 $hier"
  "dp4_tp2_flat dp4,tp2,pp1,cp1,zero0,mbs2 :: --dp 4 --tp 2"
  "dp4_tp2_hier dp4,tp2,pp1,cp1,zero0,mbs2,hier :: --dp 4 --tp 2 $hier"
)
rows=$tmp/rows.tsv
: >"$rows"
for link in $links; do
  bash "$cluster" shape "$link"
  bash "$cluster" mpirun -np 8 --bind-to none "$bin" calibrate --out "$tmp/machine.$link.json" --config "$cfg" \
    --seconds 0.05 | sed "s/^/$link: /"
  for spec in "${runs[@]}"; do
    read -r name layout rest <<<"$spec"
    tflags=${rest#:: }
    before=$(link_bytes)
    # shellcheck disable=SC2086
    bash "$cluster" mpirun -np 8 --bind-to none "$bin" train --config "$cfg" --set data.dir="$tmp/data" \
      --set train.steps="$steps" --set train.batch_size=16 $tflags --print-mesh \
      --metrics "$tmp/$name.$link.jsonl" >"$tmp/$name.$link.out"
    after=$(link_bytes)
    "$bin" plan --config "$cfg" --machine "$tmp/machine.$link.json" --devices 8 --global-batch 16 --layout "$layout" \
      --json "$tmp/$name.$link.plan.json" >/dev/null
    if [ "$link" = "${links%% *}" ]; then
      sed -n '/^DP all-reduce/,+2p' "$tmp/$name.$link.out" | sed "s/^/$name: /"
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$link" "$tmp/$name.$link.jsonl" "$tmp/$name.$link.plan.json" \
      "$((after - before))" >>"$rows"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$here/bench/cluster_machine.py" table_dp "$rows" "$steps"

#!/usr/bin/env bash
# Placement on an emulated cluster (docs/CLUSTER.md, "Placement"): 2 nodes × 4
# ranks (scripts/cluster.sh, network namespaces), the link between them shaped
# to each of LINKS in turn (tc changed between runs). Three runs of
# configs/plan/validate.toml per link:
#   dp2_tp4_placed   dp 2 × tp 4, mpirun's ranks node by node: TP inside a node, DP across
#   dp2_tp4_across   the same layout launched --map-by node with --placement ranks: TP across the link
#   pp2_tp4_placed   pp 2 × tp 4 placed: TP inside a node, the pipeline's sends across
# For each: the median step time (rank 0, steps after the first), the ledger's
# bytes per axis and per link (rank 0, one step), the bytes the link carried
# (tc's counters of both nodes' veth ends, whole run), beside the planner's
# prediction on the machine `meshtrain calibrate` measures across the cluster
# at that link speed (both levels; docs/PLANNER.md, "Calibration").
#
#   bench/cluster_placement.sh [BUILD] [LINKS] [STEPS]     LINKS default: "1gbit 200mbit"
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
links=${2:-1gbit 200mbit}
steps=${3:-6}
bin=$(realpath "$here/$build/meshtrain")
cluster=$here/scripts/cluster.sh
export MT_CLUSTER_PREFIX=mtcb
tmp=$(mktemp -d)
trap 'bash "$cluster" down; rm -rf "$tmp"' EXIT
source "$here/tests/dist/common.sh" # make_data, mpi
cfg=$here/configs/plan/validate.toml
make_data
bash "$cluster" up 2 --ranks-per-node 4 --link "${links%% *}"
bash "$cluster" ping
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"


source "$here/bench/cluster_common.sh" # link_bytes

# name layout mpirun-flags :: train-flags
runs=(
  "dp2_tp4_placed dp2,tp4,pp1,cp1,zero0,mbs2 :: --dp 2 --tp 4"
  "dp2_tp4_across dp2,tp4,pp1,cp1,zero0,mbs2 --map-by node :: --dp 2 --tp 4 --placement ranks"
  "pp2_tp4_placed dp1,tp4,pp2,cp1,zero0,mbs2 :: --pp 2 --tp 4"
)
rows=$tmp/rows.tsv
: >"$rows"
for link in $links; do
  bash "$cluster" shape "$link"
  bash "$cluster" mpirun -np 8 --bind-to none "$bin" calibrate --out "$tmp/machine.$link.json" --config "$cfg" \
    --seconds 0.05 | sed "s/^/$link: /"
  for spec in "${runs[@]}"; do
    read -r name layout rest <<<"$spec"
    mflags=${rest%%::*}
    tflags=${rest#*:: }
    before=$(link_bytes)
    # shellcheck disable=SC2086
    bash "$cluster" mpirun -np 8 --bind-to none $mflags "$bin" train --config "$cfg" --set data.dir="$tmp/data" \
      --set train.steps="$steps" $tflags --print-mesh --metrics "$tmp/$name.$link.jsonl" >"$tmp/$name.$link.out"
    after=$(link_bytes)
    # The across run is predicted on a machine of 2-rank nodes: its tp 4 then crosses the link (as it
    # does), and so does its dp (which in fact stays inside a node: that term of the prediction is high).
    dpn=4
    [ "$name" = dp2_tp4_across ] && dpn=2
    python3 "$here/bench/cluster_machine.py" nodes "$tmp/machine.$link.json" "$dpn" "$tmp/machine.json"
    "$bin" plan --config "$cfg" --machine "$tmp/machine.json" --devices 8 --global-batch 8 --layout "$layout" \
      --json "$tmp/$name.$link.plan.json" >/dev/null
    if [ "$link" = "${links%% *}" ]; then
      grep -E '^(TP|PP|DP) groups: .*\((each|[0-9])' "$tmp/$name.$link.out" | sed "s/^/$name: /"
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$link" "$tmp/$name.$link.jsonl" "$tmp/$name.$link.plan.json" \
      "$((after - before))" >>"$rows"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$here/bench/cluster_machine.py" table "$rows" "$steps"

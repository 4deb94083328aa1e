#!/usr/bin/env bash
# The node order on an emulated cluster (docs/CLUSTER.md, "Placement"): 2
# nodes × 2 ranks (scripts/cluster.sh), the link shaped to each of LINKS in
# turn. Four runs of configs/plan/validate.toml per link, in pairs that differ
# only in which axis a node holds:
#   tp2_cp2u_tp   tp 2 × cp 2 (Ulysses), --placement nodes:   TP inside a node, cp's all-to-alls across
#   tp2_cp2u_cp   the same, --placement nodes:cp:             the all-to-alls inside, TP across
#   ep2_tp2_tp    dp 2 × tp 2, 4 experts at ep 2, nodes:      TP inside, the experts' all-to-all across
#   ep2_tp2_dp    the same, --placement nodes:dp:             the all-to-all inside, TP across
# For each: the median step time (rank 0, steps after the first), the ledger's
# bytes per axis and per link (rank 0, the last step), the bytes the link
# carried (tc), beside the planner's prediction of the same layout and node
# order (its `inner=` token) on the machine `meshtrain calibrate` measures
# across the cluster at that link speed.
#
#   bench/cluster_inner.sh [BUILD] [LINKS] [STEPS]     LINKS default: "1gbit 200mbit"
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
links=${2:-1gbit 200mbit}
steps=${3:-6}
bin=$(realpath "$here/$build/meshtrain")
cluster=$here/scripts/cluster.sh
export MT_CLUSTER_PREFIX=mtci
tmp=$(mktemp -d)
trap 'bash "$cluster" down; rm -rf "$tmp"' EXIT
source "$here/tests/dist/common.sh" # make_data, mpi
source "$here/bench/cluster_common.sh" # link_bytes
make_data
cfg=$here/configs/plan/validate.toml
moe=$tmp/validate_moe.toml  # the same model with 4 experts, 2 a token
sed 's/^ffn_hidden = .*/&\nn_experts = 4\ntop_k = 2/' "$cfg" >"$moe"
bash "$cluster" up 2 --ranks-per-node 2 --link "${links%% *}"
bash "$cluster" ping
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"

u=(--set parallel.cp_impl=ulysses)
e=(--set parallel.ep=2)
# name config layout :: train-flags
runs=(
  "tp2_cp2u_tp $cfg dp1,tp2,pp1,cp2,ulysses,ep1,zero0,mbs2 :: --tp 2 --cp 2 ${u[*]}"
  "tp2_cp2u_cp $cfg dp1,tp2,pp1,cp2,ulysses,ep1,zero0,mbs2,inner=cp :: --tp 2 --cp 2 ${u[*]} --placement nodes:cp"
  "ep2_tp2_tp $moe dp2,tp2,pp1,cp1,ep2,zero0,mbs2 :: --dp 2 --tp 2 ${e[*]}"
  "ep2_tp2_dp $moe dp2,tp2,pp1,cp1,ep2,zero0,mbs2,inner=dp :: --dp 2 --tp 2 ${e[*]} --placement nodes:dp"
)
rows=$tmp/rows.tsv
: >"$rows"
for link in $links; do
  bash "$cluster" shape "$link"
  bash "$cluster" mpirun -np 4 --bind-to none "$bin" calibrate --out "$tmp/machine.$link.json" --config "$cfg" \
    --seconds 0.05 | sed "s/^/$link: /"
  for spec in "${runs[@]}"; do
    read -r name config layout rest <<<"$spec"
    tflags=${rest#*:: }
    before=$(link_bytes)
    # shellcheck disable=SC2086
    bash "$cluster" mpirun -np 4 --bind-to none "$bin" train --config "$config" --set data.dir="$tmp/data" \
      --set train.steps="$steps" $tflags --print-mesh --metrics "$tmp/$name.$link.jsonl" >"$tmp/$name.$link.out"
    after=$(link_bytes)
    "$bin" plan --config "$config" --machine "$tmp/machine.$link.json" --devices 4 --global-batch 8 \
      --layout "$layout" --json "$tmp/$name.$link.plan.json" >/dev/null
    if [ "$link" = "${links%% *}" ]; then
      grep -E '^(TP|CP|DP|EP) groups: .*\((each|[0-9])' "$tmp/$name.$link.out" | sed "s/^/$name: /"
    fi
    printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$link" "$tmp/$name.$link.jsonl" "$tmp/$name.$link.plan.json" \
      "$((after - before))" >>"$rows"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 "$here/bench/cluster_machine.py" table_axes "$rows" "$steps"

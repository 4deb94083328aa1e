#!/usr/bin/env bash
# A mixture-of-experts model (docs/MODEL.md "Mixture of experts") under data
# parallelism, every rank holding every expert: 10 steps' losses, gradient
# norms and final tensors equal the one-process run's within 1e-5 (relative),
# and so do the load-balancing loss and the tokens routed to each expert; the
# one-process run twice is bitwise identical. The one-process run has the same
# microbatch size, so the router losses pool the same groups of sequences.
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set model.n_experts=4 --set model.expert_ffn_hidden=24 --set model.router_aux_loss_coef=0.05
  --set model.router_z_loss_coef=0.001)


run ref 1 --set train.microbatch_size=2
run ref_again 1 --set train.microbatch_size=2
check_bitwise ref_again ref "one process rerun"
for spec in "dp2_zero0 2 --dp 2 --zero 0" "dp2_zero1 2 --dp 2 --zero 1" "dp4_zero3 4 --dp 4 --zero 3"; do
  read -r name np flags <<<"$spec"
  # shellcheck disable=SC2086
  run "$name" "$np" $flags --set train.microbatch_size=2
  check "$name" ref
  check_router "$name" ref
done

# Top 1 with a dense layer before the MoE layer (moe_every = 2).
every=(--set model.moe_every=2 --set model.top_k=1 --set train.microbatch_size=2)
run ref_every2 1 "${every[@]}"
run dp2_zero3_every2 2 --dp 2 --zero 3 "${every[@]}"
check dp2_zero3_every2 ref_every2
check_router dp2_zero3_every2 ref_every2
finish "mixture-of-experts"

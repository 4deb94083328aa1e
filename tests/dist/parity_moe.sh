#!/usr/bin/env bash
# A mixture-of-experts model (docs/MODEL.md "Mixture of experts") under data
# parallelism, every rank holding every expert, and with tp, pp and cp (below):
# 10 steps' losses, gradient
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

# With tp, pp and cp (docs/PARALLELISM.md "Expert parallelism"): pp 2 with an
# MoE layer on each stage (the load-balancing loss pools both layers' counts:
# they travel between the stages) and with moe_every 2, top 1 (the first stage
# has none); cp 2, alone and with ep 2 carved out of it.
for spec in "pp2 2 --pp 2" "cp2 2 --cp 2" "cp2_ep2 2 --cp 2 --set parallel.ep=2"; do
  read -r name np flags <<<"$spec"
  # shellcheck disable=SC2086
  run "$name" "$np" $flags --set train.microbatch_size=2
  check "$name" ref
  check_router "$name" ref
done
run pp2_every2 2 --pp 2 "${every[@]}"
check pp2_every2 ref_every2
check_router pp2_every2 ref_every2
# tp 2 + SP (each tp rank routes its sequence shard; the router and expert
# gradients summed over tp), and ep 2 over dp 2 with tp 2 without SP (each tp
# rank routes every token, a copy of the other's work) and with SP. As in
# parity_tp.sh, adam_eps = 1e-5: a tp gradient is a sum of per-rank partial
# sums, and Adam's first updates amplify the rounding of an element whose
# gradient nearly cancels (docs/PARALLELISM.md "Exactness, tested"); with
# 1e-6 these runs stay within 7e-6 of the one-process run, too near 1e-5.
eps=(--set train.adam_eps=1e-5 --set train.microbatch_size=2)
run ref_eps5 1 "${eps[@]}"
for spec in "tp2_sp 2 --tp 2 --set parallel.sp=true" "dp2_tp2_ep2 4 --dp 2 --tp 2 --set parallel.ep=2" \
  "dp2_tp2_sp_ep2 4 --dp 2 --tp 2 --set parallel.sp=true --set parallel.ep=2"; do
  read -r name np flags <<<"$spec"
  # shellcheck disable=SC2086
  run "$name" "$np" $flags "${eps[@]}"
  check "$name" ref_eps5
  check_router "$name" ref_eps5
done
finish "mixture-of-experts"

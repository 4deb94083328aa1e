#!/usr/bin/env bash
# The canonical mode with a mixture of experts (docs/PARALLELISM.md "The
# canonical mode", "Expert parallelism"): the tiny MoE model (4 experts, top 2,
# the aux and z losses on) is BITWISE one process with the same microbatch —
# per-step losses and gradient norms, and the saved model, `compare --rtol 0`:
#   - dp 2, dp 4 ZeRO 3, pp 2, and under expert parallelism dp 2 x ep 2,
#     dp 4 x ep 2 (the experts' leaves over each ep pair's atoms, then summed
#     over their replica pairs) and dp 4 x ep 4; ep 2 with ZeRO 1;
#   - with the aux-loss-free router bias at dp 2 x ep 2, and with a capacity
#     (model.capacity_factor 1, choices dropped) at dp 2;
#   - the default mode at dp 2 x ep 2 is NOT bitwise (the comparison can fail:
#     there each expert's rows of both atoms are one product);
#   - a checkpoint saved at step 5 on dp 2 x ep 2 resumes on dp 4 x ep 4 and
#     ends bitwise the one-process run;
#   - what is not built is refused by name (MoE under SP, an ep that is not a
#     power of two).
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/dist/common.sh
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set model.n_experts=4 --set model.expert_ffn_hidden=24 --set model.router_aux_loss_coef=0.05
  --set model.router_z_loss_coef=0.001 --set train.seed=2 --set train.microbatch_size=2)
canon=(--set parallel.reduction=canonical)

train() {
  local name=$1 np=$2
  shift 2
  timeout 120 "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" --metrics "$tmp/$name.jsonl" \
    --save "$tmp/$name" >/dev/null 2>"$tmp/$name.err" || { fail "$name: the run failed: $(tail -3 "$tmp/$name.err")"; return 1; }
}
cmp_runs() {
  "$bin" compare --rtol 0 --grad-norm-rtol 0 "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" \
    --model-b "$tmp/$2" >"$tmp/$1.cmp" 2>&1
}
same() {
  if cmp_runs "$1" "$2"; then echo "ok   $1: bitwise $2"; else
    fail "$1: differs from $2"
    tail -4 "$tmp/$1.cmp"
  fi
}

train ref 1 "${canon[@]}"
for spec in "dp2 2 --dp 2" "dp4_zero3 4 --dp 4 --zero 3" "pp2 2 --pp 2" "dp2_ep2 2 --dp 2 --set parallel.ep=2" \
  "dp4_ep2 4 --dp 4 --set parallel.ep=2" "dp4_ep4 4 --dp 4 --set parallel.ep=4" \
  "dp2_ep2_zero1 2 --dp 2 --zero 1 --set parallel.ep=2"; do
  read -r name np flags <<<"$spec"
  # shellcheck disable=SC2086
  train "$name" "$np" "${canon[@]}" $flags && same "$name" ref
done
bias=(--set model.router_bias_rate=0.01 --set model.router_skew=1)
train ref_bias 1 "${canon[@]}" "${bias[@]}"
train dp2_ep2_bias 2 "${canon[@]}" "${bias[@]}" --dp 2 --set parallel.ep=2 && same dp2_ep2_bias ref_bias
cap=(--set model.capacity_factor=1.0)
train ref_cap 1 "${canon[@]}" "${cap[@]}"
train dp2_cap 2 "${canon[@]}" "${cap[@]}" --dp 2 && same dp2_cap ref_cap

# The default mode is not bitwise at ep 2: the check sees what the mode changes.
train default_ep2 2 --dp 2 --set parallel.ep=2 && train default_ref 1
if cmp_runs default_ep2 default_ref; then fail "default_ep2: bitwise one process in the default mode"; else
  echo "ok   default_ep2: not bitwise in the default mode ($(grep -m1 -o 'worst relative difference [^ ]*' "$tmp/default_ep2.cmp"))"
fi

# A checkpoint saved on dp 2 x ep 2 at step 5, resumed on dp 4 x ep 4.
ck=$tmp/ck
MESHTRAIN_FAULT=throw:0:5 "${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" "${canon[@]}" --dp 2 --set parallel.ep=2 \
  --set train.checkpoint_dir="$ck" --set train.checkpoint_every=5 >/dev/null 2>&1
if [ -f "$ck/step-00000005/metadata.json" ]; then
  train resumed 4 "${canon[@]}" --dp 4 --set parallel.ep=4 --set train.checkpoint_dir="$ck" \
    --resume "$ck/step-00000005" && same resumed ref
else
  fail "resume: the dp 2 x ep 2 run left no step-5 checkpoint"
fi

refused moe_sp 2 "does not cover mixture-of-experts layers under sequence parallelism" "${canon[@]}" --tp 2 \
  --set parallel.sp=true --set parallel.canonical_tp=2
refused ep3 3 "parallel.ep (3) must be a power of two in the canonical mode" "${canon[@]}" --dp 3 \
  --set parallel.ep=3 --set model.n_experts=3 --set train.batch_size=6

[ "$failures" -eq 0 ] && echo "canonical moe: all checks passed" || echo "canonical moe: $failures failed"
[ "$failures" -eq 0 ]

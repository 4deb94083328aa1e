#!/usr/bin/env bash
# Recomputation (docs/MODEL.md "Recomputation"): every choice of
# train.recompute — full, and selective with each module alone and with all
# three — gives losses, gradient norms and a saved model bitwise equal to the
# run without recomputation (meshtrain compare --rtol 0 on all three): in one
# process, under tp 2 + SP (the recomputed norms gathered again over tp), under
# pp 2 (1f1b: two microbatches in flight, one shared recomputed set), and in the
# canonical mode at dp 2 against the canonical one-process run; and selective
# attention with attention dropout (masks regenerated), attention and norms
# under cp 2 (ring attention run again), all three on a 2 x 2 tp grid (the
# gathered inputs gathered again) and with a mixture of experts. Bad values are refused
# at start-up on every rank, naming the value and the allowed ones.
# Usage: recompute.sh path/to/meshtrain
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set train.steps=5)
start=$SECONDS

choices=(full attention mlp norms attention,mlp,norms)
# choice_flags CHOICE: full, or the modules of a selective choice.
choice_flags() {
  if [ "$1" = full ]; then
    echo "--set train.recompute=full"
  else
    echo "--set train.recompute=selective --set train.recompute_modules=$1"
  fi
}
# exact NAME REF: losses, gradient norms and saved tensors bitwise equal.
exact() {
  local out
  if out=$("$bin" compare "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" --model-b "$tmp/$2" \
    --rtol 0 --grad-norm-rtol 0 --tensor-rtol 0); then
    echo "ok   $1: bitwise $2 ($(tail -1 <<<"$out"))"
  else
    echo "FAIL $1 against $2: $out"
    failures=$((failures + 1))
  fi
}
# layout NAME RANKS FLAGS...: NAME without recomputation, then each choice against it.
layout() {
  local name=$1 np=$2
  shift 2
  run "$name" "$np" "$@" >/dev/null
  for c in "${choices[@]}"; do
    # shellcheck disable=SC2046
    run "${name}_${c//,/_}" "$np" "$@" $(choice_flags "$c") >/dev/null
    exact "${name}_${c//,/_}" "$name"
  done
}

layout one 1
layout tp2_sp 2 --tp 2 --set parallel.sp=true
layout pp2 2 --pp 2 --set parallel.schedule=1f1b --set train.microbatch_size=2
canon=(--set parallel.reduction=canonical --set train.microbatch_size=2)
run canonical_one 1 "${canon[@]}" >/dev/null
for c in "${choices[@]}"; do
  # shellcheck disable=SC2046
  run "canonical_dp2_${c//,/_}" 2 --dp 2 "${canon[@]}" $(choice_flags "$c") >/dev/null
  exact "canonical_dp2_${c//,/_}" canonical_one
done
drop=(--set model.attention_dropout=0.2 --set model.hidden_dropout=0.1)
run dropout 1 "${drop[@]}" >/dev/null
# shellcheck disable=SC2046
run dropout_attention 1 "${drop[@]}" $(choice_flags attention) >/dev/null
exact dropout_attention dropout
run cp2 2 --cp 2 >/dev/null
# shellcheck disable=SC2046
run cp2_attention_norms 2 --cp 2 $(choice_flags attention,norms) >/dev/null
exact cp2_attention_norms cp2
grid=(--tp 4 --set parallel.tp2d=2,2 --set model.n_kv_heads=4)
run grid 4 "${grid[@]}" >/dev/null
# shellcheck disable=SC2046
run grid_all 4 "${grid[@]}" $(choice_flags attention,mlp,norms) >/dev/null
exact grid_all grid
moe=(--set model.n_experts=4 --set model.expert_ffn_hidden=24 --set model.moe_every=2)
run moe 1 "${moe[@]}" >/dev/null
# shellcheck disable=SC2046
run moe_all 1 "${moe[@]}" $(choice_flags attention,mlp,norms) >/dev/null
exact moe_all moe

# refused VALUE_FLAGS... -- TEXT: exit 1 on both ranks with TEXT in the message.
refused() {
  local flags=() out rc=0
  while [ "$1" != -- ]; do
    flags+=("$1")
    shift
  done
  out=$("${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" --dp 2 --set train.microbatch_size=4 "${flags[@]}" 2>&1) || rc=$?
  if [ "$rc" -eq 1 ] && [ "$(grep -cF -- "$2" <<<"$out")" -ge 1 ]; then
    echo "ok   refused ${flags[*]}: $(grep -m1 -F -- "$2" <<<"$out")"
  else
    echo "FAIL ${flags[*]}: exit $rc, expected exit 1 naming \"$2\": $out"
    failures=$((failures + 1))
  fi
}
refused --set train.recompute=some -- "train.recompute = 'some' is not a recomputation mode (none, full, selective"
refused --set train.recompute=selective --set train.recompute_modules=attention,ffn -- \
  "train.recompute_modules names 'ffn', which is not a module (attention, mlp, norms)"
refused --set train.recompute=selective --set train.recompute_modules= -- "needs train.recompute_modules to name"

echo "($((SECONDS - start)) s)"
[ "$failures" -eq 0 ] || {
  echo "$failures recomputation check(s) failed"
  exit 1
}
echo "all recomputation checks passed"

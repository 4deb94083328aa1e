#!/usr/bin/env bash
# SGD (momentum, Nesterov) and LAMB under dp2 zero 1, dp2 zero 3, tp2 + SP and
# pp2 against one process: 10 steps, losses, gradient norms and final tensors
# within 1e-5 (docs/MODEL.md, "Optimizer and schedule"). LAMB's trust ratios
# are per whole tensor, so they need the sums of squares over the ranks that
# hold its pieces (ZeRO shards, tp shards); a rank using its own piece's norm
# would differ here. A checkpoint of a momentum run resumes bitwise.
# Usage: parity_optim.sh path/to/meshtrain
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data

start=$SECONDS
sgd=(--set train.optimizer=sgd --set train.momentum=0.9 --set train.nesterov=true --set train.lr=0.3
  --set train.weight_decay=0.01)
lamb=(--set train.optimizer=lamb --set train.lr=0.02 --set train.weight_decay=0.01)
for opt in sgd lamb; do
  declare -n flags=$opt
  run "${opt}_one" 1 "${flags[@]}" >/dev/null
  run "${opt}_dp2_zero1" 2 "${flags[@]}" --dp 2 --zero 1 --set train.microbatch_size=4 >/dev/null
  run "${opt}_dp2_zero3" 2 "${flags[@]}" --dp 2 --zero 3 --set train.microbatch_size=4 >/dev/null
  run "${opt}_tp2_sp" 2 "${flags[@]}" --tp 2 --set parallel.sp=true >/dev/null
  run "${opt}_pp2" 2 "${flags[@]}" --pp 2 --set train.microbatch_size=2 >/dev/null
  for layout in dp2_zero1 dp2_zero3 tp2_sp pp2; do
    check "${opt}_$layout" "${opt}_one"
  done
done
# The optimizers differ from each other and from AdamW on the same data (the key is not ignored).
run adamw_one 1 --set train.lr=0.02 --set train.weight_decay=0.01 >/dev/null
if "$bin" compare "$tmp/lamb_one.jsonl" "$tmp/adamw_one.jsonl" --rtol 1e-3 >/dev/null; then
  echo "FAIL lamb_one: the same losses as AdamW"
  failures=$((failures + 1))
fi
# Resuming an SGD-with-momentum checkpoint (its momentum_buffer) is bitwise.
ck=(--dp 2 --zero 1 --set train.microbatch_size=4 --set train.checkpoint_dir="$tmp/sgd.ck"
  --set train.checkpoint_every=5)
MESHTRAIN_FAULT=throw:0:5 run sgd_cut 2 "${sgd[@]}" "${ck[@]}" >/dev/null 2>&1
run sgd_resumed 2 "${sgd[@]}" "${ck[@]}" --resume auto >/dev/null
shard=$tmp/sgd.ck/step-00000005/rank-00000.safetensors  # its header names the slices' keys
if grep -a momentum_buffer "$shard" >/dev/null && ! grep -a exp_avg "$shard" >/dev/null; then
  check_bitwise sgd_resumed sgd_dp2_zero1 "sgd dp2 zero1: 5 steps, checkpoint, resume 5"
else
  echo "FAIL sgd checkpoint: $shard holds no momentum_buffer slices (or holds Adam's)"
  failures=$((failures + 1))
fi
echo "($((SECONDS - start)) s)"
[ "$failures" -eq 0 ] || { echo "$failures optimizer parity check(s) failed"; exit 1; }
echo "all optimizer parity checks passed"

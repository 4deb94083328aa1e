#!/usr/bin/env bash
# Dropout with masks no layout changes (docs/MODEL.md, "Dropout"):
# model.attention_dropout and model.hidden_dropout on, 10 steps, against one
# process — dp2, tp2, tp2 + SP, tp4 (kv heads replicated), cp2 ring, cp2 Ulysses, pp2, and
# recomputation: losses, gradient norms and final tensors within 1e-5. Each
# mask element is keyed by global coordinates, so a rank that drew its own
# (per-rank or per-shard) mask would differ here by far more. The one-process
# run with dropout differs from the one without, and a rerun is bitwise.
# Usage: parity_dropout.sh path/to/meshtrain
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data

start=$SECONDS
drop=(--set model.attention_dropout=0.2 --set model.hidden_dropout=0.1)
run one 1 "${drop[@]}" >/dev/null
run one_again 1 "${drop[@]}" >/dev/null
check_bitwise one_again one "one process, dropout on, rerun"
run dp2 2 "${drop[@]}" --dp 2 --set train.microbatch_size=4 >/dev/null
run tp2 2 "${drop[@]}" --tp 2 >/dev/null
run tp2_sp 2 "${drop[@]}" --tp 2 --set parallel.sp=true >/dev/null
run tp4 4 "${drop[@]}" --tp 4 >/dev/null
run cp2 2 "${drop[@]}" --cp 2 >/dev/null
run cp2_ulysses 2 "${drop[@]}" --cp 2 --set parallel.cp_impl=ulysses >/dev/null  # the mask by global head
run pp2 2 "${drop[@]}" --pp 2 --set train.microbatch_size=2 >/dev/null
run recompute 1 "${drop[@]}" --set train.recompute=true >/dev/null
for layout in dp2 tp2 tp2_sp tp4 cp2 cp2_ulysses pp2 recompute; do
  check "$layout" one
done
run none 1 >/dev/null
if "$bin" compare "$tmp/one.jsonl" "$tmp/none.jsonl" --rtol 1e-3 >/dev/null; then
  echo "FAIL one: dropout on gives the losses of dropout off"
  failures=$((failures + 1))
else
  echo "ok   one: dropout changes the losses (it is applied)"
fi
echo "($((SECONDS - start)) s)"
[ "$failures" -eq 0 ] || { echo "$failures dropout parity check(s) failed"; exit 1; }
echo "all dropout parity checks passed"

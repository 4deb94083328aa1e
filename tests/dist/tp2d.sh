#!/usr/bin/env bash
# 2-D tensor parallelism (parallel.tp2d = "R,C", docs/PARALLELISM.md "2-D tensor
# parallelism"): a 1 x C grid is 1-D tp over C ranks, bitwise (tp4 alone and
# tp2 under dp2 with ZeRO 3, both also within 1e-5 of one process); every bad
# grid and every refused companion of a grid with R > 1 ends the job with one
# message naming the value and the rule, a non-zero exit and no hang.
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set train.adam_eps=1e-5)  # as parity_tp.sh, whose header says why

"$bin" train "${tiny[@]}" --set train.microbatch_size=8 --metrics "$tmp/ref.jsonl" --save "$tmp/ref"
run tp4 4 --tp 4 --set train.microbatch_size=8
run grid1x4 4 --tp 4 --set parallel.tp2d=1,4 --set train.microbatch_size=8
check grid1x4 ref
check_bitwise grid1x4 tp4 "tp2d 1,4 against tp 4"
run tp2_dp2_zero3 4 --tp 2 --dp 2 --zero 3 --set train.microbatch_size=2
run grid1x2_dp2_zero3 4 --tp 2 --dp 2 --zero 3 --set parallel.tp2d=1,2 --set train.microbatch_size=2
check grid1x2_dp2_zero3 ref
check_bitwise grid1x2_dp2_zero3 tp2_dp2_zero3 "tp2d 1,2 x dp2 zero 3 against tp 2 x dp2 zero 3"

# refused NAME WANT FLAGS...: 4 ranks, exit non-zero within 60 s, WANT on exactly
# one line of stderr (every rank refuses; rank 0 reports).
refused() {
  local what=$1 want=$2 err rc=0
  shift 2
  err=$(timeout -k 5 60 "${mpi[@]}" -np 4 "$bin" train "${tiny[@]}" --set train.steps=1 "$@" 2>&1 >/dev/null) ||
    rc=$?
  local copies
  copies=$(grep -cF -- "$want" <<<"$err" || true)
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ] || [ "$copies" -ne 1 ]; then
    echo "FAIL [$what]: exit $rc, '$want' on $copies lines; stderr: $err"
    failures=$((failures + 1))
  else
    echo "ok   [$what, exit $rc]"
  fi
}
grid=(--tp 4 --set parallel.tp2d=2,2 --set train.microbatch_size=8)
refused "R x C != tp" "parallel.tp2d ('3,2'): R x C (3 x 2 = 6) must equal parallel.tp (4)" \
  --tp 4 --set parallel.tp2d=3,2
refused "malformed" "parallel.tp2d ('2x2') must be \"R,C\"" --tp 4 --set parallel.tp2d=2x2
refused "with sp" "with parallel.sp = true: 2-D tensor parallelism is not built with it" \
  "${grid[@]}" --set parallel.sp=true
refused "with dropout" "with dropout (model.attention_dropout or model.hidden_dropout > 0)" \
  "${grid[@]}" --set model.attention_dropout=0.1
refused "with pp" "with parallel.pp > 1" --tp 2 --pp 2 --set parallel.tp2d=2,1 --set train.microbatch_size=8
refused "with cp" "with parallel.cp > 1" --tp 2 --cp 2 --set parallel.tp2d=2,1 --set train.microbatch_size=8
refused "kv heads replicated" "model.n_kv_heads (2) must be divisible by R x C (4)" "${grid[@]}"
refused "2 x 2 not built" "grids with more than one row are not built yet" "${grid[@]}" \
  --set model.n_kv_heads=4
finish "tp2d"

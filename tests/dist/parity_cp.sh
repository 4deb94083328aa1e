#!/usr/bin/env bash
# Exactness of context parallelism: every layout's per-step losses and final
# parameters equal the one-process run's within 1e-5 (relative), for
# cp in {2, 4} x tp in {1, 2} x attention by ring and by all-gather, with dp 2
# and ZeRO, with SP and with pp; the ring's exchanges in the ledger; a bitwise
# rerun. Sequences of 16 tokens: cp = 4 cuts each into 8 zigzag chunks of 2.
# adam_eps = 1e-5 as in parity_tp.sh.
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set train.adam_eps=1e-5)

"$bin" train "${tiny[@]}" --set train.microbatch_size=8 --metrics "$tmp/ref.jsonl" --save "$tmp/ref"

for impl in ring allgather; do
  for cp in 2 4; do
    for tp in 1 2; do
      name="cp${cp}_tp${tp}_${impl}"
      run "$name" $((cp * tp)) --cp "$cp" --tp "$tp" --set parallel.cp_impl="$impl" --set train.microbatch_size=4
      check "$name" ref
    done
  done
  run "cp2_dp2_zero1_${impl}" 4 --cp 2 --dp 2 --zero 1 --set parallel.cp_impl="$impl" --set train.microbatch_size=2
  check "cp2_dp2_zero1_${impl}" ref
done
run cp2_tp2_dp2_zero3_sp 8 --cp 2 --tp 2 --dp 2 --zero 3 --set parallel.sp=true --set train.microbatch_size=2
check cp2_tp2_dp2_zero3_sp ref
run cp4_dp2_zero2 8 --cp 4 --dp 2 --zero 2 --set train.microbatch_size=4
check cp4_dp2_zero2 ref
run cp2_pp2_tp2_sp 8 --cp 2 --pp 2 --tp 2 --set parallel.sp=true --set train.microbatch_size=2
check cp2_pp2_tp2_sp ref

# The ring in the ledger (--explain): per attention layer and microbatch,
# cp - 1 sends of the packed [k | v | k_pos] block forward, and in the backward
# cp - 1 more of them plus cp - 1 of the travelling [dk | dv]. One microbatch of
# 2 sequences, 4 tokens each on a rank, 2 kv heads of 8: [2, 4, 2·2·8 + 1].
"${mpi[@]}" -np 4 "$bin" train "${tiny[@]}" --cp 4 --set train.microbatch_size=2 --set train.batch_size=2 \
  --set train.steps=1 --explain >"$tmp/explain.txt"
fwd=$(grep -c '^rank 1 | cp | send .* | \[2, 4, 33\] | 264 elements | layer 0 attn: ring_attention k,v,pos forward$' "$tmp/explain.txt" || true)
bwd=$(grep -c '^rank 1 | cp | send .* | \[2, 4, 32\] | 256 elements | layer 0 attn: ring_attention dk,dv backward$' "$tmp/explain.txt" || true)
if [ "$fwd" = 3 ] && [ "$bwd" = 3 ]; then
  echo "ok   ring ledger: 3 k/v sends forward and 3 dk/dv sends backward per layer (cp = 4)"
else
  echo "FAIL ring ledger: $fwd k/v sends forward, $bwd dk/dv sends backward (want 3 and 3)"
  grep '^rank 1 ' "$tmp/explain.txt" | head -40
  failures=$((failures + 1))
fi

# The same layout twice: bitwise identical losses and parameters.
run again 4 --cp 4 --set parallel.cp_impl=ring --set train.microbatch_size=4
check_bitwise again cp4_tp1_ring "cp4 ring twice"

finish context-parallel

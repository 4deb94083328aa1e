#!/usr/bin/env bash
# Exactness of context parallelism: every layout's per-step losses and final
# parameters equal the one-process run's within the derived bound, for
# cp in {2, 4} x tp in {1, 2} x attention by ring, all-gather and Ulysses
# (4 heads, 2 kv heads: at cp 4 and at tp 2 each kv head is replicated over two
# all-to-all ranks; cp 4 x tp 2 has too few heads for it), the hybrid (pairs, a ring of two) at cp 4, with dp 2 and
# ZeRO, with SP, with pp and with experts (ep 2 over dp x cp); the ring's
# exchanges in the ledger; a bitwise rerun. Sequences of 16 tokens: cp = 4 cuts each into 8 zigzag chunks of 2.
# adam_eps = 1e-5 as in parity_tp.sh.
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set train.adam_eps=1e-5)

"$bin" train "${tiny[@]}" --set train.microbatch_size=8 --metrics "$tmp/ref.jsonl" --save "$tmp/ref"

for impl in ring allgather ulysses; do
  for cp in 2 4; do
    for tp in 1 2; do
      # Ulysses splits each tp rank's heads over cp: 4 heads do not make tp 2 x cp 4.
      [ "$impl" = ulysses ] && [ $((cp * tp)) -gt 4 ] && continue
      name="cp${cp}_tp${tp}_${impl}"
      run "$name" $((cp * tp)) --cp "$cp" --tp "$tp" --set parallel.cp_impl="$impl" --set train.microbatch_size=4
      check "$name" ref
    done
  done
  run "cp2_dp2_zero1_${impl}" 4 --cp 2 --dp 2 --zero 1 --set parallel.cp_impl="$impl" --set train.microbatch_size=2
  check "cp2_dp2_zero1_${impl}" ref
done
run cp4_hybrid 4 --cp 4 --set parallel.cp_impl=hybrid --set parallel.cp_ulysses=2 --set train.microbatch_size=4
check cp4_hybrid ref
# Its groups in the rank map: pairs of consecutive cp ranks, rings across them.
"${mpi[@]}" -np 4 "$bin" train "${tiny[@]}" --cp 4 --set parallel.cp_impl=hybrid --set parallel.cp_ulysses=2 \
  --set train.microbatch_size=4 --set train.steps=1 --print-mesh >"$tmp/mesh.txt"
if grep -q '^cp_a2a groups (Ulysses all-to-all of q, k, v and out): {0, 1} {2, 3}$' "$tmp/mesh.txt" &&
  grep -q '^cp_ring groups (ring of k, v across the groups): {0, 2} {1, 3}$' "$tmp/mesh.txt"; then
  echo "ok   hybrid rank map: pairs {0, 1} {2, 3}, rings {0, 2} {1, 3}"
else
  echo "FAIL hybrid rank map:"
  cat "$tmp/mesh.txt"
  failures=$((failures + 1))
fi
run cp4_hybrid_tp2_sp 8 --cp 4 --tp 2 --set parallel.sp=true --set parallel.cp_impl=hybrid --set parallel.cp_ulysses=2 \
  --set train.microbatch_size=4
check cp4_hybrid_tp2_sp ref
run cp2_pp2_ulysses 4 --cp 2 --pp 2 --set parallel.cp_impl=ulysses --set train.microbatch_size=2
check cp2_pp2_ulysses ref
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

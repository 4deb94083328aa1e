#!/usr/bin/env bash
# The canonical mode under context parallelism (parallel.canonical_cp;
# parallel/cp_canonical.h, cp_pieces.h; docs/PARALLELISM.md "The canonical
# mode"): with the grain C = 4 every sequence of 512 tokens is 8 zigzag chunks
# of 64, piece p = chunks {p, 7-p}, and every layout is BITWISE one process
# with the same C — per-step losses, gradient norms and the saved model,
# `compare --rtol 0`. Checks:
#   - cp 2 (two pieces a rank) and cp 4 (one), ring and allgather, Ulysses at
#     cp 2 and the hybrid (pairs, a ring of two) at cp 4, dp 2 x cp 2
#     (against one process with the same 2 microbatches) and cp 2 x pp 2;
#   - the default mode at cp 2 is not bitwise one process, nor is one process
#     at canonical_cp = 1 against 4 (the comparisons can fail);
#   - a checkpoint saved at cp 2 (ring) at step 2 resumes at cp 4 (allgather) and at
#     cp 2 (Ulysses) and ends bitwise one process; resuming it with another grain is refused by name;
#   - tied embeddings (model.tie_embeddings: the embedding's tree over (microbatch, piece) + the head's,
#     added last; canonical_store.h) at cp 2 (ring, with --explain-memory: every row exact), the cp 4
#     hybrid, dp 2 x cp 2 and cp 2 x pp 2 (the tied exchange between the stages), each bitwise one
#     tied process with the same grain, and the tied cp 2 checkpoint resumed at cp 4 (allgather);
#   - bad grains and what is not built yet are refused at start-up by name
#     (Ulysses at cp 4 over 2 kv heads: a kv head shared by two ranks).
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/dist/common.sh
source "$(dirname "$0")/common.sh"
make_data
# seq_len / C = 128 tokens a piece: whole fixed GEMM blocks (the grain's rule).
tiny+=(--set model.max_seq_len=512 --set train.seq_len=512 --set train.microbatch_size=1
  --set train.batch_size=1 --set train.steps=4)
canon=(--set parallel.reduction=canonical --set parallel.canonical_cp=4)

# train NAME RANKS FLAGS...: metrics and model under $tmp/NAME.
train() {
  local name=$1 np=$2
  shift 2
  timeout 120 "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" --metrics "$tmp/$name.jsonl" \
    --save "$tmp/$name" >"$tmp/$name.out" 2>"$tmp/$name.err" || { fail "$name: the run failed: $(tail -3 "$tmp/$name.err")"; return 1; }
}

# same NAME REF: bitwise equal (losses, gradient norms, every tensor).
same() {
  if "$bin" compare --rtol 0 --grad-norm-rtol 0 "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" \
    --model-b "$tmp/$2" >"$tmp/$1.cmp" 2>&1; then
    echo "ok   $1: bitwise $2"
  else
    fail "$1: differs from $2"
    tail -4 "$tmp/$1.cmp"
  fi
}

# differs NAME REF: not bitwise (the check above can fail).
differs() {
  if "$bin" compare --rtol 0 --grad-norm-rtol 0 "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" \
    --model-b "$tmp/$2" >"$tmp/$1.cmp" 2>&1; then
    fail "$1: bitwise $2, but it should differ"
  else
    echo "ok   $1: not bitwise $2 ($(grep -m1 -o 'worst relative difference [^ ]*' "$tmp/$1.cmp"))"
  fi
}

train ref 1 "${canon[@]}"
train ref_b2 1 "${canon[@]}" --set train.batch_size=2
# cp 2 ring also saves the checkpoint the resume below starts from (saving changes no step).
ck=$tmp/ck
train cp2_ring 2 "${canon[@]}" --set parallel.cp=2 --set train.checkpoint_dir="$ck" \
  --set train.checkpoint_every=2 && same cp2_ring ref
train cp2_allgather 2 "${canon[@]}" --set parallel.cp=2 --set parallel.cp_impl=allgather &&
  same cp2_allgather ref
for impl in ring allgather; do
  train "cp4_$impl" 4 "${canon[@]}" --set parallel.cp=4 --set parallel.cp_impl=$impl && same "cp4_$impl" ref
done
# Ulysses: the heads' attention over the whole sequence, the same key chunks; the
# hybrid (pairs, a ring of two) over the pair's pieces.
train cp2_ulysses 2 "${canon[@]}" --set parallel.cp=2 --set parallel.cp_impl=ulysses && same cp2_ulysses ref
train cp4_hybrid 4 "${canon[@]}" --set parallel.cp=4 --set parallel.cp_impl=hybrid --set parallel.cp_ulysses=2 &&
  same cp4_hybrid ref
train dp2_cp2 4 "${canon[@]}" --dp 2 --set parallel.cp=2 --set train.batch_size=2 && same dp2_cp2 ref_b2
# One microbatch a step: gpipe (1f1b needs at least pp of them).
train cp2_pp2 4 "${canon[@]}" --set parallel.cp=2 --pp 2 --set parallel.schedule=gpipe && same cp2_pp2 ref

# Tied embeddings: the embedding's and the head's trees over (microbatch, piece) apart, added last, in
# every layout as in one process (canonical_store.h); cp 2 x pp 2 adds them in the tied exchange.
tied=("${canon[@]}" --set model.tie_embeddings=true)
train ref_tied 1 "${tied[@]}"
train ref_tied_b2 1 "${tied[@]}" --set train.batch_size=2
ckt=$tmp/ck_tied
train cp2_ring_tied 2 "${tied[@]}" --set parallel.cp=2 --set train.checkpoint_dir="$ckt" \
  --set train.checkpoint_every=2 --explain-memory && same cp2_ring_tied ref_tied
if verdict=$(grep '^memory model: ' "$tmp/cp2_ring_tied.out") && [[ $verdict == "memory model: all "*" rows within their bounds" ]]; then
  echo "ok   cp2_ring_tied: $verdict"
else
  fail "cp2_ring_tied: the memory model: ${verdict:-no table} $(grep -m2 OUTSIDE "$tmp/cp2_ring_tied.out")"
fi
train cp4_hybrid_tied 4 "${tied[@]}" --set parallel.cp=4 --set parallel.cp_impl=hybrid \
  --set parallel.cp_ulysses=2 && same cp4_hybrid_tied ref_tied
train dp2_cp2_tied 4 "${tied[@]}" --dp 2 --set parallel.cp=2 --set train.batch_size=2 && same dp2_cp2_tied ref_tied_b2
train cp2_pp2_tied 4 "${tied[@]}" --set parallel.cp=2 --pp 2 --set parallel.schedule=gpipe &&
  same cp2_pp2_tied ref_tied
if [ -f "$ckt/step-00000002/metadata.json" ]; then
  train resumed_cp4_tied 4 "${tied[@]}" --set parallel.cp=4 --set parallel.cp_impl=allgather \
    --set train.checkpoint_dir="$tmp/ck_tied4" --resume "$ckt/step-00000002" && same resumed_cp4_tied ref_tied
else
  fail "resume: the tied cp 2 run left no step-2 checkpoint"
fi

# The default mode at cp 2 against one process; one process without pieces against C = 4.
train def_ref 1
train def_cp2 2 --set parallel.cp=2 && differs def_cp2 def_ref
train ref_c1 1 --set parallel.reduction=canonical && differs ref_c1 ref

# The checkpoint cp2_ring saved at step 2, resumed at cp 4 (allgather).
if [ -f "$ck/step-00000002/metadata.json" ]; then
  train resumed_cp4 4 "${canon[@]}" --set parallel.cp=4 --set parallel.cp_impl=allgather \
    --set train.checkpoint_dir="$ck" --resume "$ck/step-00000002" && same resumed_cp4 ref
  train resumed_cp2_ulysses 2 "${canon[@]}" --set parallel.cp=2 --set parallel.cp_impl=ulysses \
    --set train.checkpoint_dir="$tmp/ck_u" --resume "$ck/step-00000002" && same resumed_cp2_ulysses ref
else
  fail "resume: the cp 2 run left no step-2 checkpoint"
fi

# refused NAME 'TEXT' FLAGS...: one process exits non-zero naming TEXT (the rules are checked at
# start-up, before any rank talks to another; tests/dist/canonical.sh checks that every rank exits).
refused() {
  local name=$1 text=$2
  shift 2
  if timeout 60 "$bin" train "${tiny[@]}" "$@" >"$tmp/$name.out" 2>&1; then
    fail "$name: ran; it should be refused"
  elif grep -qF -- "$text" "$tmp/$name.out"; then
    echo "ok   $name refused: $(grep -m1 -F -- "$text" "$tmp/$name.out" | cut -c1-150)"
  else
    fail "$name: failed without naming '$text': $(tail -2 "$tmp/$name.out")"
  fi
}
c=(--set parallel.reduction=canonical)
refused resume_grain "parallel.canonical_cp is 4 in the checkpoint but 2" "${c[@]}" \
  --set parallel.canonical_cp=2 --set train.checkpoint_dir="$ck" --resume "$ck/step-00000002"
refused grain_three "parallel.canonical_cp (3) must be a power of two" "${c[@]}" --set parallel.canonical_cp=3
refused ulysses_shared_kv "in the canonical mode needs the attention's kv heads per rank (2) divisible by the all-to-all's 4 ranks" \
  "${canon[@]}" --set parallel.cp=4 --set parallel.cp_impl=ulysses
refused grain_default "it needs parallel.reduction = canonical" --set parallel.canonical_cp=4
refused grain_blocks "a piece's rows must be whole fixed GEMM blocks" "${c[@]}" --set parallel.canonical_cp=8
refused grain_microbatch "needs train.microbatch_size = 1, not 2" "${canon[@]}" --set train.microbatch_size=2 \
  --set train.batch_size=2
refused grain_with_tp "cp pieces within tp pieces" "${canon[@]}" --set parallel.canonical_tp=2
refused grain_fake_device "parallel.canonical_cp (4) needs train.device = cpu, not fake" "${canon[@]}" \
  --set train.device=fake
refused cp2_two_each "needs one microbatch a dp rank" "${canon[@]}" --set parallel.cp=2 --set train.batch_size=2
# On 2 ranks: every rank exits, naming the rule.
if timeout 60 "${mpi[@]}" -np 2 "$bin" train "${tiny[@]}" "${c[@]}" --set parallel.cp=2 >"$tmp/cp2_grain1.out" 2>&1; then
  fail "cp2_grain1: ran; it should be refused"
elif grep -qF "parallel.cp (2) must divide parallel.canonical_cp (1)" "$tmp/cp2_grain1.out"; then
  echo "ok   cp2_grain1 refused on every rank"
else
  fail "cp2_grain1: failed without naming the rule: $(tail -2 "$tmp/cp2_grain1.out")"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures canonical cp check(s) failed"
  exit 1
fi
echo "canonical mode under cp: every layout bitwise the one-process run with the same grain"

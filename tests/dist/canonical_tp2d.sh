#!/usr/bin/env bash
# The canonical mode under 2-D tensor parallelism (parallel/canonical_tp_grid.h,
# docs/PARALLELISM.md "The canonical mode", "2-D tensor parallelism"): with the
# grains parallel.canonical_tp = c = 4 (heads, hidden, vocabulary) and
# parallel.canonical_tp_d = g = 4 (the model width), every grid is BITWISE the
# one-process run with the same c and g — per-step losses and gradient norms
# and the saved model, `compare --rtol 0 --grad-norm-rtol 0`. Checks:
#   - tp2d "2,2" (with --explain-memory: the memory model of its d-piece
#     scratch against the tracked allocator) and dp 2 x "2,1" under ZeRO 1,
#     each against one process with c = 4, g = 4;
#   - a checkpoint saved on "2,2" at step 5 resumes in one process and ends
#     bitwise the one-process run; resuming it with another g is refused;
#   - "1,2" is 1-D tp: with g = 1 it is bitwise one process with c = 4, g = 1;
#   - the comparisons can fail: one process with g = 1 is not bitwise g = 4
#     (the d pieces change the sums), nor is the default mode on "2,2" one
#     process in the default mode;
#   - bad grains are refused by name at start-up.
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/dist/common.sh
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set model.n_kv_heads=4 --set train.microbatch_size=1 --set train.steps=6)
c4=(--set parallel.reduction=canonical --set parallel.canonical_tp=4)
g4=("${c4[@]}" --set parallel.canonical_tp_d=4)

# train NAME RANKS FLAGS...: metrics and model under $tmp/NAME, the output in $tmp/NAME.out.
train() {
  local name=$1 np=$2
  shift 2
  timeout 180 "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" --metrics "$tmp/$name.jsonl" \
    --save "$tmp/$name" >"$tmp/$name.out" 2>&1 || { fail "$name: the run failed: $(tail -3 "$tmp/$name.out")"; return 1; }
}

# compare_runs A B: bitwise equal (losses, gradient norms, every tensor)?
compare_runs() {
  "$bin" compare --rtol 0 --grad-norm-rtol 0 "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" \
    --model-b "$tmp/$2" >"$tmp/$1.cmp" 2>&1
}
same() {
  if compare_runs "$1" "$2"; then echo "ok   $1: bitwise $2"; else
    fail "$1: differs from $2"
    tail -4 "$tmp/$1.cmp"
  fi
}
differs() {
  if compare_runs "$1" "$2"; then fail "$1: bitwise $2, but $3"; else echo "ok   $1: not bitwise $2 ($3)"; fi
}

train ref 1 "${g4[@]}"
train ref_g1 1 "${c4[@]}"
ck=$tmp/ck
train grid2x2 4 "${g4[@]}" --tp 4 --set parallel.tp2d=2,2 --explain-memory \
  --set train.checkpoint_dir="$ck" --set train.checkpoint_every=5 && same grid2x2 ref
verdict=$(grep '^memory model: ' "$tmp/grid2x2.out")
if [[ $verdict == "memory model: all "*" rows within their bounds" ]]; then echo "ok   grid2x2: $verdict"; else
  fail "grid2x2: ${verdict:-no memory model table}"
fi
train dp2_grid2x1_zero1 4 "${g4[@]}" --dp 2 --tp 2 --zero 1 --set parallel.tp2d=2,1 && same dp2_grid2x1_zero1 ref
# A grid under pipeline stages: each stage's grid holds the same d pieces, so its sums are the same trees.
train grid2x1_pp2 4 "${g4[@]}" --tp 2 --pp 2 --set parallel.tp2d=2,1 --explain-memory && same grid2x1_pp2 ref
verdict=$(grep '^memory model: ' "$tmp/grid2x1_pp2.out")
if [[ $verdict == "memory model: all "*" rows within their bounds" ]]; then echo "ok   grid2x1_pp2: $verdict"; else
  fail "grid2x1_pp2: ${verdict:-no memory model table}"
fi
train resume_one 1 "${g4[@]}" --resume "$ck/step-00000005" && same resume_one ref
train grid1x2 2 "${c4[@]}" --tp 2 --set parallel.tp2d=1,2 && same grid1x2 ref_g1
differs ref_g1 ref "the d pieces change the sums over the model width"
train default_one 1 --set train.steps=3
train default_2x2 4 --tp 4 --set parallel.tp2d=2,2 --set train.steps=3 &&
  differs default_2x2 default_one "the default mode's grid sums d in blocks and its collectives in the library's order"

# refused NAME RANKS TEXT FLAGS...: every rank exits non-zero, naming TEXT.
refused() {
  local name=$1 np=$2 text=$3
  shift 3
  if timeout 60 "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" >"$tmp/$name.out" 2>&1; then
    fail "$name: ran; it should be refused"
  elif grep -qF -- "$text" "$tmp/$name.out"; then
    echo "ok   $name refused: $(grep -m1 -F -- "$text" "$tmp/$name.out" | cut -c1-150)"
  else
    fail "$name: failed without naming '$text': $(tail -2 "$tmp/$name.out")"
  fi
}
refused grid_g1 4 "parallel.tp2d with parallel.tp (4) in the canonical mode needs parallel.canonical_tp_d (1)" \
  "${c4[@]}" --tp 4 --set parallel.tp2d=2,2
refused grid_g2 4 "needs parallel.canonical_tp_d (2) to be a multiple of tp" "${c4[@]}" \
  --set parallel.canonical_tp_d=2 --tp 4 --set parallel.tp2d=2,2
refused tp2_g4 2 "parallel.canonical_tp_d (4) with 1-D parallel.tp (2) is not built" "${g4[@]}" --tp 2
refused g3 1 "parallel.canonical_tp_d (3) must be a power of two dividing model.d_model (32)" "${c4[@]}" \
  --set parallel.canonical_tp_d=3
refused g64 1 "parallel.canonical_tp_d (64) must be a power of two dividing model.d_model (32)" "${c4[@]}" \
  --set parallel.canonical_tp_d=64
refused g_default 1 "parallel.canonical_tp_d (2) is the canonical mode's d grain" --set parallel.canonical_tp_d=2
refused g_fake 1 "parallel.canonical_tp_d (4) needs train.device = cpu, not fake" "${g4[@]}" \
  --set train.device=fake
refused resume_g2 1 "parallel.canonical_tp_d is 4 in the checkpoint but 2" "${c4[@]}" \
  --set parallel.canonical_tp_d=2 --resume "$ck/step-00000005"
[ "$failures" -eq 0 ] || {
  echo "$failures check(s) failed"
  exit 1
}

#!/usr/bin/env bash
# 2-D tensor parallelism (parallel.tp2d = "R,C", docs/PARALLELISM.md "2-D tensor
# parallelism"): a 1 x C grid is 1-D tp over C ranks, bitwise (tp4 alone and
# tp2 under dp2 with ZeRO 3, both also within 1e-5 of one process); grids with
# R > 1 (2 x 2, with recomputation, under dp2 with ZeRO 3, with tied
# embeddings; 2 x 1; 2 x 1 under pp 2, 2 x 2 under pp 2 tied) within the
# derived bound of one process over 10 steps, losses and saved models; training
# checkpoints resumed across 2 x 2 and one process both ways and from 2 x 1 x
# pp 2 into one process, --init-from into 2 x 2; and the comm
# ledger of one 2 x 2 step, per layer, equal to the analytic count of that
# section (1-D tp4's too); every bad grid and every refused companion of a grid
# with R > 1 ends the job with one message naming the value and the rule, a
# non-zero exit and no hang.
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

# Grids with R > 1 split every kv head over the grid: n_kv_heads = 4. Their
# runs are compared by losses, gradient norms (every step's norm is that of
# the whole gradient, summed over the ranks' distinct pieces) and the saved
# model, gathered from the 2-D pieces by their layouts (tp::tp2d_layout).
kv4=(--set model.n_kv_heads=4)
run2d() {  # run2d NAME RANKS FLAGS...: as run, with n_kv_heads = 4
  local name=$1 np=$2
  shift 2
  run "$name" "$np" "${kv4[@]}" "$@"
}
"$bin" train "${tiny[@]}" "${kv4[@]}" --set train.microbatch_size=8 --metrics "$tmp/ref_kv4.jsonl" \
  --save "$tmp/ref_kv4"
"$bin" train "${tiny[@]}" "${kv4[@]}" --set model.tie_embeddings=true --set train.microbatch_size=8 \
  --metrics "$tmp/ref_kv4_tied.jsonl" --save "$tmp/ref_kv4_tied"
run2d grid2x2 4 --tp 4 --set parallel.tp2d=2,2 --set train.microbatch_size=8
check grid2x2 ref_kv4
run2d grid2x2_recompute 4 --tp 4 --set parallel.tp2d=2,2 --set train.microbatch_size=8 --set train.recompute=true
check grid2x2_recompute ref_kv4
if diff <(grep -o '"loss":[^,]*' "$tmp/grid2x2.jsonl") <(grep -o '"loss":[^,]*' "$tmp/grid2x2_recompute.jsonl") \
  >/dev/null; then
  echo "ok   tp2d 2,2 with recomputation: the same losses bit for bit"
else
  echo "FAIL tp2d 2,2 with recomputation: losses differ from without"
  failures=$((failures + 1))
fi
run2d grid2x2_dp2_zero3 8 --tp 4 --dp 2 --zero 3 --set parallel.tp2d=2,2 --set train.microbatch_size=2
check grid2x2_dp2_zero3 ref_kv4
run2d grid2x2_tied 4 --tp 4 --set parallel.tp2d=2,2 --set model.tie_embeddings=true --set train.microbatch_size=8
check grid2x2_tied ref_kv4_tied
run2d grid2x1 2 --tp 2 --set parallel.tp2d=2,1 --set train.microbatch_size=8
check grid2x1 ref_kv4
# Grids under pipeline stages: each stage's tp group is a grid; the boundary passes each rank's d / C
# slice of the residual (Llama::residual_numel); the tied ends hold the same grid piece.
run2d grid2x1_pp2 4 --tp 2 --pp 2 --set parallel.tp2d=2,1 --set train.microbatch_size=4
check grid2x1_pp2 ref_kv4
run2d grid2x2_pp2_tied 8 --tp 4 --pp 2 --set parallel.tp2d=2,2 --set model.tie_embeddings=true \
  --set train.microbatch_size=2
check grid2x2_pp2_tied ref_kv4_tied

# Training checkpoints and --init-from across the 2-D layout: the step-5
# checkpoint of a 2 x 2 run (stopped by MESHTRAIN_FAULT at the start of step
# 5) resumed by one process, one process's resumed by 2 x 2 under dp2 with
# ZeRO 1; the one-process model loaded into 2 x 2 by --init-from trains as
# one process does from it.
reshard2d() {  # reshard2d NAME "RANKS FLAGS..." "RANKS FLAGS...": save under the first, resume under the second
  local name=$1 ck=$tmp/$1.ck
  local -a from=($2) to=($3)
  MESHTRAIN_FAULT=throw:0:5 "${mpi[@]}" -np "${from[0]}" "$bin" train "${tiny[@]}" "${kv4[@]}" "${from[@]:1}" \
    --set train.checkpoint_dir="$ck" --set train.checkpoint_every=5 >/dev/null 2>&1 || true
  if [ ! -f "$ck/step-00000005/metadata.json" ]; then
    echo "FAIL $name: the saving run left no step-5 checkpoint"
    failures=$((failures + 1))
    return
  fi
  run2d "$name" "${to[0]}" "${to[@]:1}" --set train.checkpoint_dir="$ck" --resume "$ck/step-00000005" >/dev/null
  check "$name" ref_kv4
}
reshard2d ckpt_grid2x2_to_one "4 --tp 4 --set parallel.tp2d=2,2 --set train.microbatch_size=8" \
  "1 --set train.microbatch_size=8"
reshard2d ckpt_grid2x1_pp2_to_one "4 --tp 2 --pp 2 --set parallel.tp2d=2,1 --set train.microbatch_size=4" \
  "1 --set train.microbatch_size=8"
reshard2d ckpt_one_to_grid2x2_dp2_zero1 "1 --set train.microbatch_size=8" \
  "8 --tp 4 --dp 2 --zero 1 --set parallel.tp2d=2,2 --set train.microbatch_size=4"
init=(--init-from "$tmp/ref_kv4" --set train.steps=3 --set train.microbatch_size=8)
run2d init_one 1 "${init[@]}"
run2d init_grid2x2 4 --tp 4 --set parallel.tp2d=2,2 "${init[@]}"
derive_bounds init_one "$tmp/ref_kv4"
check init_grid2x2 init_one

# The ledger of one step (one microbatch of N = 8 x 16 tokens; d 32, 4 heads
# and 4 kv heads of 8, F 48), per rank, layer, direction and axis, against
# docs/PARALLELISM.md's counts: on 2 x 2 per half and direction one all-reduce
# of N doubles over tp (the norm) and one all-gather and one reduce-scatter
# over each sub-axis (an all-gather counted at this rank's block, a
# reduce-scatter at its whole input); on 1-D tp4 one all-reduce of [N, d] per
# half each way. The expected bytes come from the formulas, not from a run.
run2d ledger2x2 4 --tp 4 --set parallel.tp2d=2,2 --set train.microbatch_size=8 --set train.steps=1 \
  --explain >"$tmp/explain2x2.txt"
run2d ledger_tp4 4 --tp 4 --set train.microbatch_size=8 --set train.steps=1 --explain >"$tmp/explain_tp4.txt"
if python3 - "$tmp/explain2x2.txt" "$tmp/explain_tp4.txt" <<'PY'; then
import re, sys
N, d, hd, H, KV, F, R, C = 8 * 16, 32, 8, 4, 4, 48, 2, 2
Q, K = H * hd, KV * hd
W = Q + 2 * K
per_half = {  # (direction, axis): bytes of the attention half + the MLP half
    ("forward", "tp"): 8 * N + 8 * N,
    ("forward", "tp_c"): 4 * N * (d // (R * C) + d // R) * 2,
    ("forward", "tp_r"): 4 * N * (W // C + Q // (R * C)) + 4 * N * (2 * F // C + F // (R * C)),
    ("backward", "tp"): 8 * N + 8 * N,
    ("backward", "tp_c"): 4 * N * (d // (R * C) + d // R) * 2,
    ("backward", "tp_r"): 4 * N * (Q // C + W // (R * C)) + 4 * N * (F // C + 2 * F // (R * C)),
}
table = {  # docs/PARALLELISM.md's ledger table, whole rows
    "forward": 8 * N + 4 * N * (d // (R * C) + W // C + Q // (R * C) + d // R)
    + 8 * N + 4 * N * (d // (R * C) + 2 * F // C + F // (R * C) + d // R),
    "backward": 4 * N * (d // (R * C) + Q // C + W // (R * C) + d // R) + 8 * N
    + 4 * N * (d // (R * C) + F // C + 2 * F // (R * C) + d // R) + 8 * N,
}
pat = re.compile(r"^rank (\d+) \| (\S+) +\| (\S+) +\| .* \| (\d+) elements? \| layer (\d+) .*(forward|backward)$")
def ledger(path):
    seen = {}
    for line in open(path):
        m = pat.match(line.strip())
        if m:
            rank, axis, op, n, layer, way = int(m[1]), m[2], m[3], int(m[4]), int(m[5]), m[6]
            size = 8 if op == "all_reduce" and "norm sums" in line else 4
            key = (rank, layer, way, axis)
            seen[key] = seen.get(key, 0) + n * size
    return seen
got = ledger(sys.argv[1])
want = {(r, l, w, a): b for r in range(4) for l in range(2) for (w, a), b in per_half.items()}
assert got == want, (sorted(got.items()), sorted(want.items()))
for r in range(4):
    for l in range(2):
        for w in ("forward", "backward"):
            assert sum(b for (r2, l2, w2, a), b in got.items() if (r2, l2, w2) == (r, l, w)) == table[w]
got1 = ledger(sys.argv[2])
want1 = {(r, l, w, "tp"): 2 * 4 * N * d for r in range(4) for l in range(2) for w in ("forward", "backward")}
assert got1 == want1, (sorted(got1.items()), sorted(want1.items()))
print("bytes per layer: 2 x 2", table["forward"], "+", table["backward"], "; tp4", 2 * 4 * N * d, "each way")
PY
  echo "ok   ledger: 2 x 2 and tp4 bytes per layer and microbatch equal their analytic counts"
else
  echo "FAIL ledger: bytes per layer differ from the analytic counts"
  grep -E '^rank 0 .*layer 0 ' "$tmp/explain2x2.txt" | head -30
  failures=$((failures + 1))
fi

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
refused "with cp" "with parallel.cp > 1" --tp 2 --cp 2 --set parallel.tp2d=2,1 --set train.microbatch_size=8
refused "kv heads replicated" "model.n_kv_heads (2) must be divisible by R x C (4)" "${grid[@]}"
refused "with experts" "with a mixture of experts (model.n_experts > 0)" "${grid[@]}" "${kv4[@]}" \
  --set model.n_experts=4
finish "tp2d"

#!/usr/bin/env bash
# The canonical mode (docs/PARALLELISM.md "The canonical mode") with kv heads
# replicated over tp and with tied embeddings over pipeline stages, each
# layout BITWISE the one-process run with the same grain (`compare --rtol 0`
# of losses and gradient norms, and every tensor of the saved model):
#   - kv slots (parallel/canonical_tp_kv.h): canonical_tp 4 with n_kv_heads 1
#     (tp 4: the head on 4 ranks; tp 2 x pp 2: on 2 ranks, 2 slots each), and
#     with n_kv_heads 2 (tp 2: no replica, two slots of one head a rank; dp 2
#     x tp 4: each head on 2 ranks);
#   - tied embeddings (parallel/canonical_store.h), with the kv slots of 2 kv
#     heads: pp 2 (1f1b), pp 2 x tp 2, dp 2 ZeRO 2 (one stage: the head's
#     tree summed over dp apart, then added) and dp 2 x pp 2 ZeRO 1 (the
#     exchange sums the whole gradient the norm reads, exchanged_grad_of);
#   - the memory model (--explain-memory) of tp 2, tp 2 x pp 2 and dp 2 ZeRO 2
#     tied: the kv slots' buffers and the tied head's tree, exactly;
#   - the default mode at tp 4 with one kv head is not bitwise one process
#     (the comparisons can fail);
#   - a checkpoint saved on tp 4 (n_kv_heads 1) at step 2 resumes on dp 2 x
#     tp 2 and ends bitwise the one-process run.
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/dist/common.sh
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set train.batch_size=4 --set train.microbatch_size=2 --set train.steps=4)
canon=(--set parallel.reduction=canonical --set parallel.canonical_tp=4)
kv1=(--set model.n_kv_heads=1)
tied=(--set model.tie_embeddings=true)

# train NAME RANKS FLAGS...: metrics and model under $tmp/NAME.
train() {
  local name=$1 np=$2
  shift 2
  timeout 120 "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" --metrics "$tmp/$name.jsonl" \
    --save "$tmp/$name" >"$tmp/$name.out" 2>"$tmp/$name.err" || {
    fail "$name: the run failed: $(tail -3 "$tmp/$name.err")"
    return 1
  }
}

# same NAME REF / differs NAME REF WHY: compare --rtol 0 passes / must fail.
same() {
  if "$bin" compare --rtol 0 "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" --model-b "$tmp/$2" \
    >"$tmp/$1.cmp" 2>&1; then
    echo "ok   $1: bitwise $2"
  else
    fail "$1: differs from $2"
    tail -4 "$tmp/$1.cmp"
  fi
}
differs() {
  if "$bin" compare --rtol 0 "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" --model-b "$tmp/$2" \
    >/dev/null 2>&1; then
    fail "$1: bitwise $2 ($3): the checks above would not see a change"
  else
    echo "ok   $1: not bitwise $2 ($3)"
  fi
}

train ref_kv1 1 "${canon[@]}" "${kv1[@]}"
train ref_kv2 1 "${canon[@]}"
train ref_tied 1 "${canon[@]}" "${tied[@]}"

# tp4_kv1 also saves checkpoints (steps 2 and 4), for the resume below.
ck=$tmp/ck
layouts=(
  "tp4_kv1 4 ref_kv1 --tp 4 ${kv1[*]} --set train.checkpoint_dir=$ck --set train.checkpoint_every=2"
  "tp2_kv2 2 ref_kv2 --tp 2 --explain-memory"
  "dp2_tp4_kv2 8 ref_kv2 --dp 2 --tp 4 --zero 1"
  "tp2_pp2_kv1 4 ref_kv1 --tp 2 --pp 2 ${kv1[*]} --explain-memory"
  "pp2_tied 2 ref_tied --pp 2 --set parallel.schedule=1f1b ${tied[*]}"
  "pp2_tp2_tied 4 ref_tied --pp 2 --tp 2 ${tied[*]}"
  "dp2_zero2_tied 2 ref_tied --dp 2 --zero 2 ${tied[*]} --explain-memory"
  "dp2_pp2_zero1_tied 4 ref_tied --dp 2 --pp 2 --zero 1 --set parallel.schedule=gpipe ${tied[*]}"
)
for spec in "${layouts[@]}"; do
  read -r name np ref flags <<<"$spec"
  # shellcheck disable=SC2086
  train "$name" "$np" "${canon[@]}" $flags && same "$name" "$ref"
done

# The memory model of the runs above that printed it (--explain-memory): every row exact or within its bound.
for name in tp2_kv2 tp2_pp2_kv1 dp2_zero2_tied; do
  verdict=$(grep -h '^memory model: ' "$tmp/$name.out" "$tmp/$name.err" 2>/dev/null || true)
  if [[ $verdict == "memory model: all "*" rows within their bounds" ]]; then
    echo "ok   $name: $verdict"
  else
    fail "$name: ${verdict:-no memory model table}"
  fi
done

# The default mode groups the replicas' sum and the pieces otherwise: tp 4 is not bitwise one process.
train default_one_kv1 1 "${kv1[@]}"
train default_tp4_kv1 4 --tp 4 "${kv1[@]}" && differs default_tp4_kv1 default_one_kv1 "the default mode"

# tp4_kv1's checkpoint of step 2, resumed on dp 2 x tp 2.
if [ -f "$ck/step-00000002/metadata.json" ]; then
  train resumed 4 "${canon[@]}" "${kv1[@]}" --dp 2 --tp 2 --set train.checkpoint_dir="$ck" \
    --resume "$ck/step-00000002" && same resumed ref_kv1
else
  fail "resume: the tp 4 run left no step-2 checkpoint"
fi

if [ "$failures" -ne 0 ]; then
  echo "$failures canonical kv/tied check(s) failed"
  exit 1
fi
echo "canonical mode: kv slots and tied embeddings over stages bitwise the one-process run"

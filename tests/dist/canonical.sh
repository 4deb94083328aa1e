#!/usr/bin/env bash
# The canonical mode (parallel.reduction = canonical; parallel/canonical.h,
# docs/PARALLELISM.md "The canonical mode"): every layout it covers is BITWISE
# the one-process run with the same microbatch (the atom) — per-step losses
# and gradient norms, and the saved model, `compare --rtol 0` — with no
# tolerance anywhere. Checks:
#   - dp 2/4/8 with ZeRO 0-3, pp 2 and 4 under every schedule, dp × pp up to
#     16 ranks, recompute, dropout, bf16 (the emulated kernel), LAMB under
#     ZeRO 3 (its per-tensor norms over sharded pieces), SGD with momentum over
#     pp 2, dp 2 ZeRO 1 under the fake device (train.device = fake: the exact
#     norms' squares through the kernel table), and dp 3 with 2 microbatches
#     per rank against one process with the same 6;
#   - tensor parallelism with the grain parallel.canonical_tp = 4 (4 kv heads,
#     so that no kv head is replicated): tp 2 (two pieces a rank), tp 4, dp 2 ×
#     tp 2 with ZeRO 1, tp 2 × pp 2 and tied embeddings at tp 2 (the
#     vocab-parallel head and embedding sharing a weight), each against one
#     process with the same 4 pieces; tp 2 with canonical_tp = 2 (one piece a
#     rank) against one process with 2; tp 2 with dropout and recomputation;
#     sequence parallelism at tp 2 and at dp 2 × tp 4 (the norms' weight
#     gradients over 4 fixed token shards, c / tp a rank), against one process
#     with the same 4 pieces; tp_overlap at tp 2 with 512 tokens a microbatch
#     (chunks of the fixed GEMM blocks: 4, and under SP 2 of each rank's
#     block) with and without SP, against one process with the same;
#   - the default mode on dp 4 and on tp 2 is not bitwise, nor is one process
#     with canonical_tp = 1 against 4 (the comparisons can fail: they see what
#     the mode and its pieces change);
#   - `--fingerprint` of dp 2 × pp 2 has every checksum of one process's;
#   - a checkpoint saved at step 5 on dp 4 ZeRO 3 resumes on dp 2 × pp 2 and
#     ends bitwise the one-process run, and one saved on dp 2 × tp 2 (ZeRO 1,
#     canonical_tp 4) resumes on tp 4 and ends bitwise one process with 4; resuming it in the default mode, or
#     with another microbatch size or canonical_tp, is refused by name;
#   - what the mode does not cover yet is refused at start-up by name.
set -uo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck source=tests/dist/common.sh
source "$(dirname "$0")/common.sh"
make_data
tiny+=(--set model.n_layers=4 --set train.microbatch_size=1)
canon=(--set parallel.reduction=canonical)

# train NAME RANKS FLAGS...: metrics and model under $tmp/NAME.
train() {
  local name=$1 np=$2
  shift 2
  timeout 180 "${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "$@" --metrics "$tmp/$name.jsonl" \
    --save "$tmp/$name" >/dev/null 2>"$tmp/$name.err" || { fail "$name: the run failed: $(tail -3 "$tmp/$name.err")"; return 1; }
}

# same NAME REF: bitwise equal (losses, gradient norms, every tensor).
same() {
  if "$bin" compare --rtol 0 "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" --model-b "$tmp/$2" \
    >"$tmp/$1.cmp" 2>&1; then
    echo "ok   $1: bitwise $2"
  else
    fail "$1: differs from $2"
    tail -4 "$tmp/$1.cmp"
  fi
}

train ref 1 "${canon[@]}"
train ref_drop 1 "${canon[@]}" --set model.attention_dropout=0.1 --set model.hidden_dropout=0.1
MESHTRAIN_BF16_MATMUL=emulated train ref_bf16 1 "${canon[@]}" --set train.precision=bf16
train ref6 1 "${canon[@]}" --set train.batch_size=6
train ref_lamb 1 "${canon[@]}" --set train.optimizer=lamb
train ref_sgd 1 "${canon[@]}" --set train.optimizer=sgd --set train.momentum=0.9
ctp=(--set parallel.canonical_tp=4 --set model.n_kv_heads=4)
train ref_c4 1 "${canon[@]}" "${ctp[@]}"
train ref_c4_tied 1 "${canon[@]}" "${ctp[@]}" --set model.tie_embeddings=true
train ref_c2 1 "${canon[@]}" --set parallel.canonical_tp=2
drop=(--set model.attention_dropout=0.1 --set model.hidden_dropout=0.1)
train ref_c4_drop 1 "${canon[@]}" "${ctp[@]}" "${drop[@]}"
# 512 tokens a microbatch: tp_overlap's chunks are fixed GEMM blocks of 128 rows, 4 of them, and
# under SP at tp 2 two of each rank's 256 tokens.
m32=(--set train.batch_size=32 --set train.microbatch_size=32 --set train.steps=3)
train ref_c4_m32 1 "${canon[@]}" "${ctp[@]}" "${m32[@]}"

layouts=(
  "one_2threads 1 ref --set train.threads=2"
  "dp2 2 ref --dp 2"
  "dp4_zero1 4 ref --dp 4 --zero 1"
  "dp2_zero2 2 ref --dp 2 --zero 2"
  "dp8_zero3 8 ref --dp 8 --zero 3"
  "pp2_1f1b 2 ref --pp 2"
  "pp4_gpipe 4 ref --pp 4 --set parallel.schedule=gpipe"
  "pp2_interleaved 2 ref --pp 2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2"
  "dp2_pp2_zero3 4 ref --dp 2 --pp 2 --zero 3"
  "dp4_pp4_zero2 16 ref --dp 4 --pp 4 --zero 2 --set parallel.schedule=gpipe"
  "dp2_recompute 2 ref --dp 2 --set train.recompute=true"
  "dp2_pp2_dropout 4 ref_drop --dp 2 --pp 2 --set model.attention_dropout=0.1 --set model.hidden_dropout=0.1"
  "dp2_bf16 2 ref_bf16 --dp 2 --set train.precision=bf16"
  "dp3 3 ref6 --dp 3 --set train.batch_size=6"
  "dp4_zero3_lamb 4 ref_lamb --dp 4 --zero 3 --set train.optimizer=lamb"
  "pp2_sgd 2 ref_sgd --pp 2 --set train.optimizer=sgd --set train.momentum=0.9"
  "dp2_zero1_fake 2 ref --dp 2 --zero 1 --set train.device=fake"
  "tp2 2 ref_c4 --tp 2 ${ctp[*]}"
  "tp4 4 ref_c4 --tp 4 ${ctp[*]}"
  "dp2_tp2_zero1 4 ref_c4 --dp 2 --tp 2 --zero 1 ${ctp[*]}"
  "tp2_pp2 4 ref_c4 --tp 2 --pp 2 ${ctp[*]}"
  "tp2_tied 2 ref_c4_tied --tp 2 ${ctp[*]} --set model.tie_embeddings=true"
  "tp2_c2 2 ref_c2 --tp 2 --set parallel.canonical_tp=2"
  "tp2_dropout_recompute 2 ref_c4_drop --tp 2 ${ctp[*]} ${drop[*]} --set train.recompute=true"
  "tp2_sp 2 ref_c4 --tp 2 ${ctp[*]} --set parallel.sp=true"
  "dp2_tp4_sp 8 ref_c4 --dp 2 --tp 4 ${ctp[*]} --set parallel.sp=true"
  "tp2_overlap 2 ref_c4_m32 --tp 2 ${ctp[*]} ${m32[*]} --set parallel.tp_overlap=true"
  "tp2_sp_overlap 2 ref_c4_m32 --tp 2 ${ctp[*]} ${m32[*]} --set parallel.tp_overlap=true --set parallel.sp=true"
)
for spec in "${layouts[@]}"; do
  read -r name np ref flags <<<"$spec"
  # shellcheck disable=SC2086
  MESHTRAIN_BF16_MATMUL=emulated train "$name" "$np" "${canon[@]}" $flags && same "$name" "$ref"
done

# The default mode is not bitwise on dp 4 (its all-reduce and its sums over
# microbatches group the terms otherwise): the comparison above can fail.
train default_one 1
train default_dp4 4 --dp 4
if "$bin" compare --rtol 0 "$tmp/default_dp4.jsonl" "$tmp/default_one.jsonl" --model-a "$tmp/default_dp4" \
  --model-b "$tmp/default_one" >/dev/null 2>&1; then
  fail "default_dp4: bitwise the one-process run in the default mode too: the checks above would not see a change"
else
  echo "ok   default_dp4: not bitwise in the default mode"
fi
# not_bitwise NAME REF WHY: compare --rtol 0 must fail.
not_bitwise() {
  if "$bin" compare --rtol 0 "$tmp/$1.jsonl" "$tmp/$2.jsonl" --model-a "$tmp/$1" --model-b "$tmp/$2" \
    >/dev/null 2>&1; then
    fail "$1: bitwise $2 ($3): the checks above would not see a change"
  else
    echo "ok   $1: not bitwise $2 ($3)"
  fi
}
train default_tp2 2 --tp 2 && not_bitwise default_tp2 default_one "the default mode at tp 2"
train ref_c1 1 "${canon[@]}" --set model.n_kv_heads=4 &&
  not_bitwise ref_c1 ref_c4 "canonical_tp 1 against 4: the pieces change the sums"

# --fingerprint (docs/FINGERPRINT.md): every activation and gradient of dp 2 x pp 2
# has the checksum of one process's, so compare finds no difference at all.
fp=(--set train.steps=2)
"$bin" train "${tiny[@]}" "${canon[@]}" "${fp[@]}" --fingerprint "$tmp/one.fp" >/dev/null 2>&1
"${mpi[@]}" -np 4 "$bin" train "${tiny[@]}" "${canon[@]}" "${fp[@]}" --dp 2 --pp 2 --fingerprint "$tmp/dp2_pp2.fp" \
  >/dev/null 2>&1
if "$bin" compare "$tmp/dp2_pp2.fp" "$tmp/one.fp" --rtol 0 2>&1 | grep -q '^ok (bitwise)'; then
  echo "ok   fingerprint: dp2_pp2's every checksum is one process's"
else
  fail "fingerprint: dp2_pp2 differs from one process: $("$bin" compare "$tmp/dp2_pp2.fp" "$tmp/one.fp" --rtol 0 2>&1 | head -3)"
fi

# A checkpoint saved on dp 4 ZeRO 3 at step 5, resumed on dp 2 x pp 2.
ck=$tmp/ck
MESHTRAIN_FAULT=throw:0:5 "${mpi[@]}" -np 4 "$bin" train "${tiny[@]}" "${canon[@]}" --dp 4 --zero 3 \
  --set train.checkpoint_dir="$ck" --set train.checkpoint_every=5 >/dev/null 2>&1
if [ -f "$ck/step-00000005/metadata.json" ]; then
  train resumed 4 "${canon[@]}" --dp 2 --pp 2 --set train.checkpoint_dir="$ck" --resume "$ck/step-00000005" &&
    same resumed ref
else
  fail "resume: the saving run left no step-5 checkpoint"
fi

# A checkpoint saved on dp 2 x tp 2 (ZeRO 1, canonical_tp 4) at step 5, resumed on tp 4.
ck_tp=$tmp/ck_tp
MESHTRAIN_FAULT=throw:0:5 "${mpi[@]}" -np 4 "$bin" train "${tiny[@]}" "${canon[@]}" "${ctp[@]}" --dp 2 --tp 2 \
  --zero 1 --set train.checkpoint_dir="$ck_tp" --set train.checkpoint_every=5 >/dev/null 2>&1
if [ -f "$ck_tp/step-00000005/metadata.json" ]; then
  train resumed_tp4 4 "${canon[@]}" "${ctp[@]}" --tp 4 --set train.checkpoint_dir="$ck_tp" \
    --resume "$ck_tp/step-00000005" && same resumed_tp4 ref_c4
else
  fail "resume: the dp 2 x tp 2 run left no step-5 checkpoint"
fi

refused resume_default 1 "parallel.reduction is canonical in the checkpoint but default" \
  --resume "$ck/step-00000005"
refused resume_microbatch 1 "train.microbatch_size is 1 in the checkpoint but 2" "${canon[@]}" \
  --set train.microbatch_size=2 --resume "$ck/step-00000005"
refused resume_canonical_tp 1 "parallel.canonical_tp is 1 in the checkpoint but 2" "${canon[@]}" \
  --set parallel.canonical_tp=2 --resume "$ck/step-00000005"
refused tp2_grain1 2 "parallel.tp (2) must divide parallel.canonical_tp (1)" "${canon[@]}" --tp 2
refused grain_tokens 1 "parallel.canonical_tp (4) must divide a microbatch's tokens" "${canon[@]}" "${ctp[@]}" \
  --set train.seq_len=6
refused grain_heads 1 "parallel.canonical_tp (8) must divide model.n_heads (4)" "${canon[@]}" \
  --set parallel.canonical_tp=8
refused grain_three 1 "parallel.canonical_tp (3) must be a power of two" "${canon[@]}" \
  --set parallel.canonical_tp=3
refused grain_default 1 "it needs parallel.reduction = canonical" --set parallel.canonical_tp=2
refused grain_fake_device 1 "parallel.canonical_tp (2) needs train.device = cpu, not fake" "${canon[@]}" \
  --set parallel.canonical_tp=2 --set train.device=fake
refused dp2_three_each 2 "to be a power of two" "${canon[@]}" --dp 2 --set train.batch_size=6
refused unknown_mode 1 "parallel.reduction ('exact') must be default or canonical" --set parallel.reduction=exact

if [ "$failures" -ne 0 ]; then
  echo "$failures canonical-mode check(s) failed"
  exit 1
fi
echo "canonical mode: every layout bitwise the one-process run"

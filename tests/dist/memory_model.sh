#!/usr/bin/env bash
# The memory model (cost/memory_model.h) against the tracked allocator: for
# each layout, two steps with --explain-memory, which prints every rank's
# modelled bytes per kind beside the peaks measured in the last step and "ok"
# or "OUTSIDE" per row. Parameters, gradients, optimizer state, activations and
# scratch must match exactly; communication buffers (and ZeRO-3's gathered
# units) within the bound the model states (docs/PARALLELISM.md, "Memory per
# rank"). Layouts: ZeRO 0-3 at dp 4, tp 2 and tp 4 with and without SP, pp 2
# under gpipe, 1f1b, interleaved and zbh1 (the split backward's output
# gradients kept from B to W, its slots freed at W), cp 2 (ring), cp 4 (all-gather, Ulysses,
# and the hybrid of two pairs),
# recomputation (full under tp 2 + SP; selective: attention alone, mlp under
# pp 2 1f1b, norms under tp 2 + SP, all three with a mixture of experts under
# tp 2 + SP), dp2 x tp2 x pp2, dp2 x cp2 x tp2, an ep 2 mixture of experts
# (and under ZeRO-3 at dp 4), LAMB under ZeRO-1 at dp 2, tied embeddings under ZeRO-3 (the
# embedding's gradient held through the backward) and over pp 2 with SGD momentum, and
# a vocabulary tp does not divide under ZeRO-3 (padded, uneven shards); and the
# checkpoint's staging copy (ckpt_staging, exact): dp 2 ZeRO 1 with asynchronous
# saves every step (the shards of parameters and AdamW state), and pp 2 with
# tied embeddings and synchronous saves (the last stage's tied copy not written);
# 2-D tp on a 2 x 2 grid with recomputation and checkpoints (its 2-D pieces'
# staging), and under dp 2 with ZeRO 3; the canonical mode's partial sums
# (parallel/canonical_store.h) at 8, 3, 4 (dp 2 ZeRO 2), 3 (pp 2 gpipe: backwards
# descending), 4 (pp 2 interleaved) and 8 (pp 2 zbh1: the store's order is W's)
# microbatches; canonical tp 2 with
# parallel.canonical_tp = 4 (two pieces a rank: the per-piece partial sums,
# parallel/canonical_tp.h; the norms' 4 token shards) and one process with the
# same 4 pieces, canonical tp 2 with SP (two token shards a rank) and with
# tp_overlap and SP (two chunks); canonical cp 2 (ring, all-gather and Ulysses) with
# parallel.canonical_cp = 4 (two pieces a rank: the per-piece weight gradients,
# parallel/cp_pieces.h; the key-chunk attention's buffers, cp_canonical.h) and
# one process with the same 4 pieces; HSDP (parallel.dp_shard = 2 at dp 4)
# at ZeRO 1, and at ZeRO 3 with checkpoints (only the first shard group stages a copy: the others hold
# the same pieces); canonical dp 2 x ep 2 (the
# expert leaves, parallel/expert_canonical.h); the hierarchical all-reduce
# (parallel.dp_allreduce) at dp 4 ZeRO 0 and ZeRO 1, small buckets (its node
# shards, one node here: g = 4, the model's lower end).
set -euo pipefail
bin=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$(dirname "$0")/common.sh"
make_data
# Four layers, so that pp 2 can interleave two chunks a rank; two steps.
tiny+=(--set model.n_layers=4 --set train.steps=2)

layouts=(
  "dp4_zero0 4 --dp 4 --zero 0 --set train.microbatch_size=2"
  "dp4_zero1 4 --dp 4 --zero 1 --set train.microbatch_size=2"
  "dp4_zero0_hier 4 --dp 4 --zero 0 --set train.microbatch_size=2 --set parallel.dp_allreduce=hierarchical --set parallel.bucket_mb=0.02"
  "dp4_zero1_hier 4 --dp 4 --zero 1 --set train.microbatch_size=2 --set parallel.dp_allreduce=hierarchical --set parallel.bucket_mb=0.02"
  "dp4_zero2 4 --dp 4 --zero 2 --set train.microbatch_size=2"
  "dp4_zero3 4 --dp 4 --zero 3 --set train.microbatch_size=2"
  "tp2 2 --tp 2"
  "tp2_sp 2 --tp 2 --set parallel.sp=true"
  "tp4 4 --tp 4"
  "tp4_sp 4 --tp 4 --set parallel.sp=true"
  "pp2_gpipe 2 --pp 2 --set parallel.schedule=gpipe --set train.microbatch_size=2"
  "pp2_1f1b 2 --pp 2 --set parallel.schedule=1f1b --set train.microbatch_size=2"
  "pp2_interleaved 2 --pp 2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set train.microbatch_size=2"
  "pp2_zbh1 2 --pp 2 --set parallel.schedule=zbh1 --set train.microbatch_size=2"
  "canonical_pp2_zbh1_m8 2 --pp 2 --set parallel.schedule=zbh1 --set parallel.reduction=canonical --set train.microbatch_size=1"
  "cp2_ring 2 --cp 2"
  "cp4_allgather 4 --cp 4 --set parallel.cp_impl=allgather"
  "cp4_ulysses 4 --cp 4 --set parallel.cp_impl=ulysses"
  "cp4_hybrid_2x2 4 --cp 4 --set parallel.cp_impl=hybrid --set parallel.cp_ulysses=2"
  "recompute_tp2_sp 2 --tp 2 --set parallel.sp=true --set train.recompute=true"
  "selective_attention 1 --set train.recompute=selective --set train.recompute_modules=attention"
  "selective_mlp_pp2_1f1b 2 --pp 2 --set train.microbatch_size=2 --set train.recompute=selective --set train.recompute_modules=mlp"
  "selective_norms_tp2_sp 2 --tp 2 --set parallel.sp=true --set train.recompute=selective --set train.recompute_modules=norms"
  "selective_all_moe_tp2_sp 2 --tp 2 --set parallel.sp=true --set model.n_experts=4 --set model.expert_ffn_hidden=24 --set model.moe_every=2 --set train.recompute=selective --set train.recompute_modules=attention,mlp,norms"
  "dp2_tp2_pp2 8 --dp 2 --tp 2 --pp 2 --zero 1 --set train.microbatch_size=2"
  "dp2_cp2_tp2 8 --dp 2 --cp 2 --tp 2 --set parallel.sp=true --zero 2 --set train.microbatch_size=4"
  "ep2_moe 2 --dp 2 --set parallel.ep=2 --zero 1 --set model.n_experts=4 --set model.expert_ffn_hidden=24 --set train.microbatch_size=2"
  "ep2_dp4_zero3 4 --dp 4 --set parallel.ep=2 --zero 3 --set model.n_experts=4 --set model.expert_ffn_hidden=24 --set train.microbatch_size=1"
  "dp2_zero1_lamb 2 --dp 2 --zero 1 --set train.optimizer=lamb --set train.microbatch_size=2"
  "dp2_zero3_tied 2 --dp 2 --zero 3 --set model.tie_embeddings=true --set train.microbatch_size=2"
  "pp2_tied_sgd 2 --pp 2 --set model.tie_embeddings=true --set train.optimizer=sgd --set train.momentum=0.9 --set train.microbatch_size=2"
  "dp2_tp2_zero3_vocab301 4 --dp 2 --tp 2 --zero 3 --set model.vocab_size=301 --set train.microbatch_size=2"
  "dp2_zero1_async_ckpt 2 --dp 2 --zero 1 --set train.microbatch_size=2 --set train.checkpoint_dir=$tmp/ck_async --set train.checkpoint_every=1 --set train.async_checkpoint=true"
  "tp2d_2x2_recompute_ckpt 4 --tp 4 --set parallel.tp2d=2,2 --set model.n_kv_heads=4 --set train.recompute=true --set train.checkpoint_dir=$tmp/ck_2d"
  "tp2d_2x2_dp2_zero3 8 --dp 2 --tp 4 --set parallel.tp2d=2,2 --set model.n_kv_heads=4 --zero 3 --set train.microbatch_size=2"
  "pp2_tied_sync_ckpt 2 --pp 2 --set model.tie_embeddings=true --set train.microbatch_size=2 --set train.checkpoint_dir=$tmp/ck_sync"
  "canonical_one_m8 1 --set parallel.reduction=canonical --set train.microbatch_size=1"
  "canonical_one_m3 1 --set parallel.reduction=canonical --set train.batch_size=6 --set train.microbatch_size=2"
  "canonical_dp2_zero2_m4 2 --dp 2 --zero 2 --set parallel.reduction=canonical --set train.microbatch_size=1"
  "canonical_pp2_gpipe_m3 2 --pp 2 --set parallel.schedule=gpipe --set parallel.reduction=canonical --set train.batch_size=3 --set train.microbatch_size=1"
  "canonical_pp2_interleaved_m4 2 --pp 2 --set parallel.schedule=interleaved --set parallel.virtual_stages=2 --set parallel.reduction=canonical --set train.microbatch_size=2"
  "canonical_tp2_c4 2 --tp 2 --set parallel.reduction=canonical --set parallel.canonical_tp=4 --set model.n_kv_heads=4 --set train.microbatch_size=2"
  "canonical_one_c4 1 --set parallel.reduction=canonical --set parallel.canonical_tp=4 --set model.n_kv_heads=4 --set train.microbatch_size=2"
  "canonical_tp2_overlap_c4 2 --tp 2 --set parallel.tp_overlap=true --set parallel.sp=true --set parallel.reduction=canonical --set parallel.canonical_tp=4 --set model.n_kv_heads=4 --set train.batch_size=16 --set train.microbatch_size=16"
  "hsdp_dp4_2x2_zero1 4 --dp 4 --zero 1 --set parallel.dp_shard=2 --set train.microbatch_size=2"
  "hsdp_dp4_2x2_zero3_saves 4 --dp 4 --zero 3 --set parallel.dp_shard=2 --set train.microbatch_size=2 --set train.checkpoint_dir=$tmp/ck_hsdp"
  "canonical_ep2_moe 2 --dp 2 --set parallel.ep=2 --zero 1 --set model.n_experts=4 --set model.expert_ffn_hidden=24 --set parallel.reduction=canonical --set train.microbatch_size=2"
  "canonical_tp2_sp_c4 2 --tp 2 --set parallel.sp=true --set parallel.reduction=canonical --set parallel.canonical_tp=4 --set model.n_kv_heads=4 --set train.microbatch_size=2"
  "canonical_cp2_ring_c4 2 --set parallel.cp=2 --set parallel.reduction=canonical --set parallel.canonical_cp=4 --set model.max_seq_len=512 --set train.seq_len=512 --set train.batch_size=1 --set train.microbatch_size=1"
  "canonical_cp2_allgather_c4 2 --set parallel.cp=2 --set parallel.cp_impl=allgather --set parallel.reduction=canonical --set parallel.canonical_cp=4 --set model.max_seq_len=512 --set train.seq_len=512 --set train.batch_size=1 --set train.microbatch_size=1"
  "canonical_cp2_ulysses_c4 2 --set parallel.cp=2 --set parallel.cp_impl=ulysses --set parallel.reduction=canonical --set parallel.canonical_cp=4 --set model.max_seq_len=512 --set train.seq_len=512 --set train.batch_size=1 --set train.microbatch_size=1"
  "canonical_one_cp4 1 --set parallel.reduction=canonical --set parallel.canonical_cp=4 --set model.max_seq_len=512 --set train.seq_len=512 --set train.batch_size=1 --set train.microbatch_size=1"
)
for spec in "${layouts[@]}"; do
  read -r -a words <<<"$spec"
  name=${words[0]} np=${words[1]}
  [[ -z ${MEMORY_MODEL_ONLY:-} || $name =~ $MEMORY_MODEL_ONLY ]] || continue  # a subset while iterating
  out=$("${mpi[@]}" -np "$np" "$bin" train "${tiny[@]}" "${words[@]:2}" --explain-memory 2>&1) || {
    echo "FAIL $name: the run failed"
    echo "$out" | tail -20
    failures=$((failures + 1))
    continue
  }
  verdict=$(grep '^memory model: ' <<<"$out" || true)
  if [[ $name == *ckpt* ]]; then  # every rank writes a share: none of its staging rows may be 0
    staged=$(grep -cE ' ckpt_staging +model +[1-9][0-9]* +exact +measured +[1-9]' <<<"$out" || true)
    [[ $staged == "$np" ]] || verdict="$staged of $np ranks stage a checkpoint copy"
  fi
  if [[ $verdict == "memory model: all "*" rows within their bounds" ]]; then
    echo "ok   $name: $verdict"
  else
    echo "FAIL $name: ${verdict:-no memory model table}"
    grep -E 'OUTSIDE' <<<"$out" || true
    failures=$((failures + 1))
  fi
done
[ "$failures" -eq 0 ] || {
  echo "$failures layout(s) failed"
  exit 1
}

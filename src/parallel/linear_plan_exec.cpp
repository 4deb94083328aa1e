// The linear plan's execution: each entry's forward and backward through the
// layer math of its form (ops/gemm.h, tensor_parallel.h, tp2d_linear.h), and
// the embedding, head and cross-entropy of the vocabulary's split.
#include <string>

#include "core/error.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/primitives.h"
#include "parallel/cp_pieces.h"
#include "parallel/linear_plan.h"
#include "parallel/tp2d_linear.h"
#include "parallel/tp_comm.h"
#include "parallel/tp_overlap.h"

namespace mt::tp {

namespace {

void add_into(float* y, const float* x, int64_t n) {
  add(y, x, n);
}

tp2d::Linear2d grid_layer(const LinearEntry& e, std::string_view label) {
  return {e.gather, e.scatter, e.out_blocks, label};
}

// A canonical column layer's (or the head's) forward over its pieces: q|k|v
// with kv slots (canonical_tp_kv.h) or the blocks as they are.
void column_pieces(float* out, const float* inp, const float* w, int64_t N, const LinearEntry& e,
                   const Pieces& p) {
  if (e.slots.on()) return slots_qkv_forward(out, inp, w, N, e.in, e.out_blocks.front(), e.slots, p);
  pieces_column_forward(out, inp, w, N, e.in, e.out_blocks, p);
}

// A canonical column layer's (or the head's) forward under SP with chunked
// overlap (canonical_tp.h chunked_under_sp): each rank's block of the input,
// gathered into saved, multiplied as it arrives.
void chunked_column_forward(float* out, float* saved, const float* inp, const float* w, int64_t N,
                            const LinearEntry& e, const Pieces& p, std::string_view label) {
  int64_t OCl = 0;
  for (int64_t b : e.out_blocks)
    OCl += b;
  all_gather_matmul(saved, inp, N, e.in, *e.tp, Overlap::on,
                    [&](int64_t first, int64_t rows) {
                      column_pieces(out + first * OCl, saved + first * e.in, w, rows, e, p);
                    },
                    {label, "gather_from_sp", "forward"}, {});
}

}  // namespace

Pieces2d LinearPlan::pieces2d(const LinearEntry& e, std::string_view label) const {
  const bool row = e.role == Role::row;  // o, down: the output is d, the input heads / hidden
  return {row ? e.dpieces : e.pieces,
          row ? e.pieces : e.dpieces,
          e.out_blocks,
          e.gather,
          e.scatter,
          e.reduce,
          label,
          scratch_.pieces2d};
}

void LinearPlan::forward(float* out, float* saved, const float* inp, const float* w, int64_t N,
                         const LinearEntry& e, std::string_view label, const float* resid) const {
  if (e.dpieces > 0) return pieces2d_forward(out, saved, inp, w, N, e.in, e.out, pieces2d(e, label), resid);
  if (e.pieces > 0 && e.role == Role::row)
    return pieces_row_forward(out, inp, w, N, e.in, e.out, pieces(e, label), resid);
  if (e.pieces > 0) {
    MT_CHECK(resid == nullptr, "a column-parallel layer has no residual add (", std::string(label), ")");
    if (chunked_under_sp(N, pieces(e, label)))
      return chunked_column_forward(out, saved, inp, w, N, e, pieces(e, label), label);
    return column_pieces(out, gathered_input(saved, inp, N, e, label), w, N, e, pieces(e, label));
  }
  if (e.form == Form::grid) {
    tp2d::linear2d_forward(out, saved, scratch_.grid, inp, w, N, e.in, e.out, grid_layer(e, label));
    if (resid != nullptr) add_into(out, resid, N * (e.out / e.scatter->size()));
    return;
  }
  if (e.role == Role::row) {
    row_parallel_forward(out, scratch_.part, inp, w, N, e.in, e.out, e.layer(label), resid);
    return;
  }
  MT_CHECK(resid == nullptr, "a column-parallel layer has no residual add (", std::string(label), ")");
  column_parallel_forward(out, saved, inp, w, N, e.in, e.out, e.layer(label));
}

const float* LinearPlan::gathered_input(float* saved, const float* inp, int64_t N, const LinearEntry& e,
                                        std::string_view label) const {
  if (!e.gathers()) return inp;
  keep_input(saved, inp, N, e, label);
  return saved;
}

void LinearPlan::keep_input(float* saved, const float* inp, int64_t N, const LinearEntry& e,
                            std::string_view label) const {
  if (!e.gathers()) return;
  if (e.form == Form::grid) {
    tp2d::gather_features(saved, scratch_.grid, inp, N, e.in, {}, *e.gather,
                          comm_label(label, "gather_features", "forward", {N, e.in / e.gather->size()}));
    return;
  }
  gather_from_sp_forward(saved, inp, N, e.in, *e.tp, label);
}

bool LinearPlan::weight_grad_by_pieces(float* dw, const float* dout, const float* gemm_in, int64_t N,
                                       const LinearEntry& e) const {
  if (cp_pieces_ <= 1 || dw == nullptr) return false;
  cp::pieces_weight_grad(dw, scratch_.wpieces, dout, gemm_in, N, e.in, e.out, cp_pieces_);
  return true;
}

void LinearPlan::backward(float* dinp, float* dw, const float* dout, const float* gemm_in, const float* w,
                          int64_t N, const LinearEntry& e, std::string_view label,
                          std::string_view kv_label) const {
  if (e.dpieces > 0) return pieces2d_backward(dinp, dw, dout, gemm_in, w, N, e.in, e.out, pieces2d(e, label));
  if (weight_grad_by_pieces(dw, dout, gemm_in, N, e)) {  // tp 1 here (check_canonical): dinp alone below
    if (dinp != nullptr) backward(dinp, nullptr, dout, gemm_in, w, N, e, label, kv_label);
    return;
  }
  if (e.pieces > 0 && e.role == Role::row && chunked_under_sp(N, pieces(e, label))) {
    float* d = scratch_.gathered;  // every token's output gradient, each rank's block used as it arrives
    all_gather_matmul(d, dout, N, e.out, *e.tp, Overlap::on,
                      [&](int64_t first, int64_t rows) {
                        if (dinp != nullptr)
                          pieces_row_backward(dinp + first * e.in, nullptr, d + first * e.out, nullptr, w,
                                              rows, e.in, e.out, pieces(e, label));
                      },
                      {label, "scatter_to_sp", "backward"}, {});
    return pieces_row_backward(nullptr, dw, d, gemm_in, w, N, e.in, e.out, pieces(e, label));
  }
  if (e.pieces > 0 && e.role == Role::row) {
    const float* d = dout;  // SP: the output gradient of every token (scatter_to_sp backward)
    if (e.sp == SequenceParallel::on) {
      scatter_to_sp_backward(scratch_.gathered, dout, N, e.out, *e.tp, label);
      d = scratch_.gathered;
    }
    return pieces_row_backward(dinp, dw, d, gemm_in, w, N, e.in, e.out, pieces(e, label));
  }
  if (e.pieces > 0 && e.slots.on())
    return slots_qkv_backward(dinp, dw, scratch_.kv, dout, gemm_in, w, N, e.in, e.out_blocks.front(), e.slots,
                              e.kv, kv_label, pieces(e, label));
  if (e.pieces > 0)
    return pieces_column_backward(dinp, dw, dout, gemm_in, w, N, e.in, e.out_blocks, pieces(e, label));
  if (e.form == Form::grid) {
    tp2d::linear2d_backward(dinp, dw, scratch_.grid, dout, gemm_in, w, N, e.in, e.out, grid_layer(e, label));
    return;
  }
  if (e.role == Role::row) {
    row_parallel_backward(dinp, dw, scratch_.gathered, dout, gemm_in, w, N, e.in, e.out, e.layer(label));
    return;
  }
  ReplicatedRows kv;
  if (e.kv != nullptr) kv = {e.kv, e.kv_first, e.kv_count, e.in, scratch_.kv, kv_label};
  column_parallel_backward(dinp, dw, scratch_.part, dout, gemm_in, w, N, e.in, e.out, e.layer(label), kv);
}

void LinearPlan::embed_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t V,
                               const LinearEntry& e) const {
  if (e.form == Form::local) return embedding_forward(out, ids, table, N, e.in);
  if (e.form == Form::megatron)
    return vocab_embedding_forward(out, scratch_.part, ids, table, N, e.in, V, e.layer(e.site));
  float* partial = scratch_.grid;  // [N, d/R], Partial over tp_c
  vocab_lookup(partial, ids, table, N, e.in, V, e.vocab_rows);
  tp2d::scatter_features(out, partial + N * e.in, partial, N, e.in, {}, *e.scatter,
                         comm_label(e.site, "scatter_features", "forward", {N, e.in}));
}

void LinearPlan::embed_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t V,
                                const LinearEntry& e) const {
  if (cp_pieces_ > 1) return cp::pieces_embedding_backward(dtable, dout, ids, N, e.in, cp_pieces_);
  if (e.form == Form::local) return embedding_backward(dtable, dout, ids, N, e.in);
  if (e.form == Form::megatron)
    return vocab_embedding_backward(dtable, scratch_.gathered, dout, ids, N, e.in, V, e.layer(e.site));
  float* full = scratch_.grid;  // [N, d/R]: every tp_c rank's gradient of its features
  tp2d::gather_features(full, full + N * e.in, dout, N, e.in, {}, *e.scatter,
                        comm_label(e.site, "scatter_features", "backward", {N, e.in / e.scatter->size()}));
  vocab_lookup_backward(dtable, full, ids, N, e.in, V, e.vocab_rows);
}

void LinearPlan::head_forward(float* logits, float* saved, const float* inp, const float* w, int64_t N,
                              const LinearEntry& e) const {
  if (e.dpieces > 0) return pieces2d_forward(logits, saved, inp, w, N, e.in, e.out, pieces2d(e, e.site));
  if (e.pieces > 0 && chunked_under_sp(N, pieces(e, e.site)))
    return chunked_column_forward(logits, saved, inp, w, N, e, pieces(e, e.site), e.site);
  if (e.pieces > 0)
    return pieces_column_forward(logits, gathered_input(saved, inp, N, e, e.site), w, N, e.in, e.out_blocks,
                                 pieces(e, e.site));
  if (e.form != Form::grid) {
    column_parallel_forward(logits, saved, inp, w, N, e.in, e.out, e.layer(e.site));
    return;
  }
  tp2d::gather_features(saved, scratch_.grid, inp, N, e.in, {}, *e.gather,
                        comm_label(e.site, "gather_features", "forward", {N, e.in / e.gather->size()}));
  linear_forward(logits, saved, w, N, e.in, e.out);
  reduce_from_tp_forward(logits, N, e.out, *e.reduce, e.site);
}

void LinearPlan::head_backward(float* dinp, float* dw, const float* dlogits, const float* gemm_in,
                               const float* w, int64_t N, const LinearEntry& e) const {
  if (e.dpieces > 0)
    return pieces2d_backward(dinp, dw, dlogits, gemm_in, w, N, e.in, e.out, pieces2d(e, e.site));
  if (weight_grad_by_pieces(dw, dlogits, gemm_in, N, e)) {
    if (dinp != nullptr) head_backward(dinp, nullptr, dlogits, gemm_in, w, N, e);
    return;
  }
  if (e.pieces > 0)
    return pieces_column_backward(dinp, dw, dlogits, gemm_in, w, N, e.in, e.out_blocks, pieces(e, e.site));
  if (e.form != Form::grid) {
    column_parallel_backward(dinp, dw, scratch_.part, dlogits, gemm_in, w, N, e.in, e.out, e.layer(e.site));
    return;
  }
  float* dpart = scratch_.grid;  // [N, d/R], Partial over tp_c (the vocabulary shards)
  linear_backward(dpart, dw, dlogits, gemm_in, w, N, e.in, e.out);
  tp2d::scatter_features(dinp, dpart + N * e.in, dpart, N, e.in, {}, *e.gather,
                         comm_label(e.site, "gather_features", "backward", {N, e.in}));
}

void LinearPlan::loss_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                              int64_t N, int64_t V, int32_t ignore_index, const LinearEntry& e) const {
  if (e.dpieces > 0)  // the vocabulary's pieces over tp_c (its split), one process: all
    return pieces_cross_entropy_forward(losses, lse, logits, targets, N, V, ignore_index,
                                        {e.pieces, e.vocab, e.site});
  if (e.pieces > 0)
    return pieces_cross_entropy_forward(losses, lse, logits, targets, N, V, ignore_index, pieces(e, e.site));
  if (e.vocab == nullptr) return cross_entropy_forward(losses, lse, logits, targets, N, V, ignore_index);
  vocab_cross_entropy_forward(losses, lse, logits, targets, N, V, ignore_index, *e.vocab, e.site);
}

void LinearPlan::loss_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                               float dloss, int64_t N, int64_t V, int32_t ignore_index,
                               const LinearEntry& e) const {
  if (e.dpieces > 0)
    return pieces_cross_entropy_backward(dlogits, logits, lse, targets, dloss, N, V, ignore_index,
                                         {e.pieces, e.vocab, e.site});
  if (e.pieces > 0)
    return pieces_cross_entropy_backward(dlogits, logits, lse, targets, dloss, N, V, ignore_index,
                                         pieces(e, e.site));
  if (e.vocab == nullptr)
    return cross_entropy_backward(dlogits, logits, lse, targets, dloss, N, V, ignore_index);
  vocab_cross_entropy_backward(dlogits, logits, lse, targets, dloss, N, V, ignore_index, *e.vocab);
  if (e.reduce != nullptr) reduce_from_tp_backward(dlogits, N, e.out, *e.reduce, e.site);  // identity
}

}  // namespace mt::tp

#include "parallel/canonical_tp.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "core/device_mirror.h"
#include "core/error.h"
#include "core/exact_sum.h"
#include "ops/gemm.h"
#include "ops/primitives.h"
#include "ops/vocab_kernels.h"
#include "parallel/tp_comm.h"

namespace mt::tp {

namespace {

// The ranks' roots combined by the same tree (their pieces are aligned blocks).
void sum_over_tp(float* x, int64_t rows, int64_t cols, const Pieces& p, std::string_view pair,
                 std::string_view direction) {
  if (!p.tp_on()) return;
  p.tp->all_reduce(x, rows * cols, ElemType::f32, SumOrder::tree,
                   comm_label(p.site, pair, direction, {rows, cols}));
}

// Under SP the whole sum is formed in p.full, and this rank keeps its tokens' rows.
float* whole(float* dst, const Pieces& p) {
  if (!p.sp) return dst;
  MT_CHECK(p.full != nullptr && p.tp_on(), "canonical pieces under SP need tp and scratch [N, d] at site ",
           std::string(p.site));
  return p.full;
}

// The ranks' roots combined by the tree, into dst: all-reduced in place, or
// (SP) reduce-scattered from p.full into this rank's N / tp rows.
void finish_over_tp(float* dst, int64_t rows, int64_t cols, const Pieces& p, std::string_view pair,
                    std::string_view direction) {
  if (!p.sp) return sum_over_tp(dst, rows, cols, p, pair, direction);
  const int64_t local = rows / p.tp->size();
  p.tp->reduce_scatter(p.full, dst, local * cols, ElemType::f32, SumOrder::tree,
                       comm_label(p.site, pair, direction, {rows, cols}));
}

// at [rows, C] = rows [r0, r0 + rows) of the tree over this rank's pieces (one piece: its product in place).
void rows_over_pieces(float* at, int64_t r0, int64_t rows, int64_t C, const Pieces& p,
                      const PieceRows& gemm) {
  for (int64_t j = 0; j < p.count; ++j)
    gemm(j, r0, rows, p.count > 1 ? p.leaves + j * rows * C : at);
  if (p.count > 1) sum_in_tree_order(at, p.leaves, static_cast<int>(p.count), rows * C);
}

// Chunk k of SP's reduce-scatter: rows [r0, r0 + rows) of every rank's token block, in p.full as
// [tp, rows, C] (chunk k's region starts at row r0 · tp), then the tree reduce-scatter into this rank's rows.
Work scatter_chunk(float* dst, int64_t N, int64_t C, int64_t r0, int64_t rows, const Pieces& p,
                   const PieceRows& gemm, std::string_view pair, std::string_view direction) {
  const int P = p.tp->size();
  const int64_t Nl = N / P;
  float* chunk = p.full + r0 * P * C;
  for (int t = 0; t < P; ++t)
    rows_over_pieces(chunk + t * rows * C, t * Nl + r0, rows, C, p, gemm);
  return p.tp->reduce_scatter_async(chunk, dst + r0 * C, rows * C, ElemType::f32, SumOrder::tree,
                                    comm_label(p.site, pair, direction, {P * rows, C}));
}

// dst [N, C] (SP: [N / tp, C]) = the sum over pieces and then over tp, `meanwhile` run before the last
// collective completes. Whole: one product per piece and one collective. Under tp_overlap in chunks of
// kFixedRowBlock rows (SP: of each rank's token block, chunked_under_sp), each chunk's tree all-reduce
// (SP: reduce-scatter) in flight while the next multiplies: the chunks are the fixed GEMM blocks
// (ops/gemm.h), so each chunk's product is the very OpenBLAS call the whole product makes for those
// rows, and the tree gives an element the same bits in any chunk.
void sum_rows(float* dst, int64_t N, int64_t C, const Pieces& p, const PieceRows& gemm, std::string_view pair,
              std::string_view direction, const std::function<void()>& meanwhile = {}) {
  if (!p.overlap || !p.tp_on() || (p.sp && !chunked_under_sp(N, p))) {
    rows_over_pieces(whole(dst, p), 0, N, C, p, gemm);
    finish_over_tp(dst, N, C, p, pair, direction);
    if (meanwhile) meanwhile();
    return;
  }
  MT_CHECK(fixed_gemm_blocks(), "canonical tp_overlap needs the fixed GEMM blocks (ops/gemm.h) at site ",
           std::string(p.site));
  std::vector<Work> inflight;
  const int64_t span = p.sp ? N / p.tp->size() : N;  // the rows each chunk cuts
  for (int64_t r0 = 0; r0 < span; r0 += kFixedRowBlock) {
    const int64_t rows = std::min(kFixedRowBlock, span - r0);
    if (p.sp) {
      inflight.push_back(scatter_chunk(dst, N, C, r0, rows, p, gemm, pair, direction));
      continue;
    }
    rows_over_pieces(dst + r0 * C, r0, rows, C, p, gemm);
    inflight.push_back(p.tp->all_reduce_async(dst + r0 * C, rows * C, ElemType::f32, SumOrder::tree,
                                              comm_label(p.site, pair, direction, {rows, C})));
  }
  if (meanwhile) meanwhile();
  for (Work& w : inflight)
    w.wait();
}

int64_t piece_width(int64_t width, const Pieces& p) {
  MT_CHECK(p.count >= 1 && width % p.count == 0, "a split width (", width, ") is not ", p.count,
           " pieces at site ", std::string(p.site));
  return width / p.count;
}

// This rank's vocabulary rows [begin, begin + V/tp) (c divides V: no padding).
VocabRange rank_vocab(int64_t V, const Pieces& p) {
  const int64_t P = p.tp_on() ? p.tp->size() : 1, t = p.tp_on() ? p.tp->rank() : 0;
  const int64_t Vl = V / P;
  return {t * Vl, (t + 1) * Vl, Vl};
}

}  // namespace

void sum_piece_rows(float* dst, int64_t N, int64_t C, const Pieces& p, const PieceRows& gemm,
                    std::string_view pair, std::string_view direction,
                    const std::function<void()>& meanwhile) {
  sum_rows(dst, N, C, p, gemm, pair, direction, meanwhile);
}

bool chunked_under_sp(int64_t N, const Pieces& p) {
  return p.sp && p.overlap && p.tp_on() && (N / p.tp->size()) % kFixedRowBlock == 0;
}

void pieces_column_forward(float* out, const float* inp, const float* w, int64_t N, int64_t IC,
                           const std::vector<int64_t>& blocks, const Pieces& p) {
  int64_t OCl = 0;
  for (int64_t b : blocks)
    OCl += b;
  int64_t at = 0;  // the block's first row
  for (int64_t b : blocks) {
    const int64_t pw = piece_width(b, p);
    for (int64_t j = 0; j < p.count; ++j) {
      const int64_t r = at + j * pw;
      sgemm(Trans::no, Trans::yes, N, pw, IC, inp, IC, w + r * IC, IC, out + r, OCl, Out::assign);
    }
    at += b;
  }
}

void pieces_column_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            int64_t N, int64_t IC, const std::vector<int64_t>& blocks, const Pieces& p) {
  int64_t OCl = 0;
  for (int64_t b : blocks)
    OCl += b;
  const auto wgrad = [&] {
    if (dw == nullptr) return;
    int64_t at = 0;
    for (int64_t b : blocks) {
      const int64_t pw = piece_width(b, p);
      for (int64_t j = 0; j < p.count; ++j) {
        const int64_t r = at + j * pw;
        sgemm(Trans::yes, Trans::no, pw, IC, N, dout + r, OCl, inp, IC, dw + r * IC, IC, Out::add);
      }
      at += b;
    }
  };
  if (dinp == nullptr) return wgrad();
  const PieceRows gemm = [&](int64_t j, int64_t r0, int64_t rows, float* into) {
    int64_t at = 0;
    for (size_t b = 0; b < blocks.size(); ++b) {  // the piece's blocks, accumulated in block order
      const int64_t pw = piece_width(blocks[b], p), r = at + j * pw;
      sgemm(Trans::no, Trans::no, rows, IC, pw, dout + r0 * OCl + r, OCl, w + r * IC, IC, into, IC,
            b == 0 ? Out::assign : Out::add);
      at += blocks[b];
    }
  };
  sum_rows(dinp, N, IC, p, gemm, p.sp ? "gather_from_sp" : "copy_to_tp", "backward", wgrad);
}

void pieces_row_forward(float* out, const float* inp, const float* w, int64_t N, int64_t ICl, int64_t OC,
                        const Pieces& p, const float* resid) {
  const int64_t pw = piece_width(ICl, p);
  const PieceRows gemm = [&](int64_t j, int64_t r0, int64_t rows, float* into) {
    sgemm(Trans::no, Trans::yes, rows, OC, pw, inp + r0 * ICl + j * pw, ICl, w + j * pw, ICl, into, OC,
          Out::assign);
  };
  sum_rows(out, N, OC, p, gemm, p.sp ? "scatter_to_sp" : "reduce_from_tp", "forward");
  if (resid != nullptr) add(out, resid, (p.sp ? N / p.tp->size() : N) * OC);
}

void pieces_row_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                         int64_t N, int64_t ICl, int64_t OC, const Pieces& p) {
  const int64_t pw = piece_width(ICl, p);
  for (int64_t j = 0; j < p.count; ++j) {
    if (dinp != nullptr)
      sgemm(Trans::no, Trans::no, N, pw, OC, dout, OC, w + j * pw, ICl, dinp + j * pw, ICl, Out::assign);
    if (dw != nullptr)
      sgemm(Trans::yes, Trans::no, OC, pw, N, dout, OC, inp + j * pw, ICl, dw + j * pw, ICl, Out::add);
  }
}

void pieces_cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                  int64_t N, int64_t V, int32_t ignore_index, const Pieces& p) {
  const VocabRange vs = rank_vocab(V, p);
  const int64_t pw = piece_width(vs.rows, p);
  DeviceScratch<double> max(N), sum(N), target(N), parts(2 * p.count * N);
  double *mx = max.data(), *sm = sum.data(), *tg = target.data();
  double *sp = parts.data(), *tp = sp + p.count * N;  // per piece: Σ exp, the target's logit
  vocab_ce_max(mx, logits, N, vs);                    // a maximum: exact in any order
  if (p.tp_on()) p.tp->all_reduce(mx, N, comm_label(p.site, "vocab_ce max", "forward", {N}), ReduceOp::max);
  for (int64_t j = 0; j < p.count; ++j) {  // piece j's columns: row stride Vl, vocabulary rows of piece j
    const VocabRange piece{vs.begin + j * pw, vs.begin + (j + 1) * pw, vs.rows};
    vocab_ce_sums(sp + j * N, tp + j * N, logits + j * pw, targets, mx, N, V, ignore_index, piece);
  }
  const int P = static_cast<int>(p.count);
  sum_in_tree_order(sm, sp, P, N);
  sum_in_tree_order(tg, tp, P, N);  // one non-zero term: exact
  if (p.tp_on()) {
    p.tp->all_reduce(sm, N, ElemType::f64, SumOrder::tree,
                     comm_label(p.site, "vocab_ce sumexp", "forward", {N}));
    p.tp->all_reduce(tg, N, ElemType::f64, SumOrder::tree,
                     comm_label(p.site, "vocab_ce target", "forward", {N}));
  }
  vocab_ce_finish(losses, lse, mx, sm, tg, targets, N, ignore_index);
}

void pieces_cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                                   const int32_t* targets, float dloss, int64_t N, int64_t V,
                                   int32_t ignore_index, const Pieces& p) {
  vocab_ce_backward(dlogits, logits, lse, targets, dloss, N, V, ignore_index, rank_vocab(V, p));
}

}  // namespace mt::tp

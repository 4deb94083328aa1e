// Tensor parallelism in the canonical mode (parallel.reduction = canonical,
// docs/PARALLELISM.md "The canonical mode"): the linear layers and the
// vocab-parallel cross-entropy with every sum over a tp-split dim taken over
// fixed pieces, so that tp 1 (one process), 2, 4, … up to the grain give the
// same bits.
//
// The grain c = parallel.canonical_tp (a power of two that tp divides). A
// piece p (0 … c−1) of a split weight is exactly what tp rank p would hold at
// tp = c; for a fused site (q|k|v, gate|up) it is piece p of each block. Rank
// t of tp holds the c/tp pieces [t·c/tp, (t+1)·c/tp), an aligned block.
//
// Every GEMM that touches a split dim is one GEMM per piece (and per fused
// block), with the same (M, N, K) in every layout; only the row strides
// differ, so no invariance of the BLAS over M or N is relied on. Each sum over
// pieces — the row layer's output (K split), a column layer's input gradient
// (K = its split output features), the head's input gradient, the
// cross-entropy's Σ exp — is the canonical tree over the c pieces
// (core/exact_sum.h): a rank sums its aligned subtree of c/tp leaves
// (sum_in_tree_order), then the tp all-reduce combines the ranks' roots with
// SumOrder::tree. Within a piece, the blocks of a fused column site add in
// block order (one GEMM each, accumulating). The row maximum and the target
// logit are exact (a max; one non-zero term), and everything else is
// elementwise or per head.
//
// Under sequence parallelism (`sp`) the sums over pieces that land on the
// residual stream — the row layer's output, a column layer's input gradient —
// are formed whole over the N tokens in `full` [N, d] and reduce-scattered by
// SumOrder::tree (each rank keeps its N / tp tokens: the same elements, the
// same tree); the column layer's input and the row layer's output gradient
// are all-gathered by the caller (copies, exact).
//
// Under tp_overlap the row layer's output and a column layer's input gradient
// run in chunks of kFixedRowBlock token rows (ops/gemm.h): a chunk's
// products, the tree over its pieces, then its tree all-reduce in flight
// while the next chunk multiplies (a column layer's weight gradient computes
// while the last is in flight). The chunks are the canonical mode's fixed
// GEMM blocks, so each chunk's product is the same OpenBLAS call as the whole
// product's for those rows (only addresses differ), and every sum is
// elementwise: the chunking changes no element's bits. With N ≤ 128 tokens a
// microbatch there is one chunk. Under SP a chunk is rows [r0, r0 + 128) of
// every rank's block of N / tp tokens, reduce-scattered by the tree, and the
// caller multiplies each rank's gathered block as it arrives
// (all_gather_matmul): this needs N / tp to be a multiple of 128, so that the
// blocks are still the fixed GEMM blocks (chunked_under_sp); otherwise the
// sums and gathers are whole (the same bits, nothing overlapped).
//
// Argument grammar as tensor_parallel.h. Parameter gradients accumulate (+=),
// activation gradients are assigned. `leaves` [pieces, N, d] holds a rank's
// per-piece partial sums when it has more than one piece (d: the width of
// the summed tensor, the model width at every site).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "comm/group.h"

namespace mt::tp {

struct Pieces {
  int64_t count = 0;      // this rank's pieces, c / tp (≥ 1)
  Group* tp = nullptr;    // null or of size 1: one process holds all c
  std::string_view site;  // the ledger site
  float* leaves = nullptr;
  bool sp = false;        // sequence parallelism: N / tp tokens on the residual stream
  float* full = nullptr;  // sp: [N, d], the whole sum before its reduce-scatter
  bool overlap = false;   // tp_overlap: the sums over tp in row chunks, each in flight (below)

  bool tp_on() const { return tp != nullptr && tp->size() > 1; }
};

// Piece j's product for rows [r0, r0 + rows) of a sum over pieces, into `into` [rows, C].
using PieceRows = std::function<void(int64_t j, int64_t r0, int64_t rows, float* into)>;

// dst [N, C] (SP: [N / tp, C]) = the tree over this rank's pieces of `gemm`'s
// products, then over tp (the pair's collective, whole or in the chunks
// above); `meanwhile` runs before the last collective completes. What the
// column layers' input gradients use (canonical_tp_kv.h too).
void sum_piece_rows(float* dst, int64_t N, int64_t C, const Pieces& p, const PieceRows& gemm,
                    std::string_view pair, std::string_view direction,
                    const std::function<void()>& meanwhile = {});

// Whether SP's sums and gathers run in chunks under tp_overlap (above).
bool chunked_under_sp(int64_t N, const Pieces& p);

// out[N, OCl] = inp[N, IC] · w[OCl, IC]ᵀ, the blocks (local widths, in block
// order) each cut into `count` pieces; no communication (copy_to_tp forward).
void pieces_column_forward(float* out, const float* inp, const float* w, int64_t N, int64_t IC,
                           const std::vector<int64_t>& blocks, const Pieces& p);

// dinp [N, IC] = Σ over pieces (tree) of dout[:, piece] · w[piece] (null:
// skipped, on every rank alike), then summed over tp (copy_to_tp backward;
// sp: dinp [N / tp, IC], gather_from_sp backward);
// dw [OCl, IC] += doutᵀ · inp per piece (null: skipped).
void pieces_column_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            int64_t N, int64_t IC, const std::vector<int64_t>& blocks, const Pieces& p);

// out[N, OC] = Σ over pieces (tree, then over tp: reduce_from_tp forward) of
// inp[:, piece] · w[:, piece]ᵀ, plus resid (same shape) when given (sp: out
// and resid [N / tp, OC], scatter_to_sp forward).
void pieces_row_forward(float* out, const float* inp, const float* w, int64_t N, int64_t ICl, int64_t OC,
                        const Pieces& p, const float* resid = nullptr);

// dinp[N, ICl] = dout · w per piece (null: skipped); dw[OC, ICl] += doutᵀ · inp per piece.
void pieces_row_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                         int64_t N, int64_t ICl, int64_t OC, const Pieces& p);

// The vocab-parallel cross-entropy of vocab_parallel.h over logits [N, V/tp]
// (c divides V: no padding), Σ exp over the pieces' vocabulary rows in the
// tree; one process (no tp) runs it over the whole vocabulary.
void pieces_cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                  int64_t N, int64_t V, int32_t ignore_index, const Pieces& p);
void pieces_cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                                   const int32_t* targets, float dloss, int64_t N, int64_t V,
                                   int32_t ignore_index, const Pieces& p);

}  // namespace mt::tp

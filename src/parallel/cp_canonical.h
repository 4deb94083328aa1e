// Context parallelism in the canonical mode (parallel.reduction = canonical,
// parallel.canonical_cp = C > 1; docs/PARALLELISM.md "The canonical mode").
//
// Pieces. Every layout, one process included, cuts each sequence of T tokens
// into the 2·C zigzag chunks of c = T/(2C) and calls piece p the chunks
// {p, 2C−1−p}: what cp rank p holds at cp = C. At cp = P (P divides C) rank r
// holds the aligned block of pieces [r·C/P, (r+1)·C/P), and its local rows are
// those pieces in piece order, each piece's chunk p then chunk 2C−1−p:
//
//   T = 16, C = 2 (c = 4):  one process: 0..3 12..15 | 4..7 8..11
//                           cp 2, rank 0: 0..3 12..15   rank 1: 4..7 8..11 (the zigzag)
//
// Piece order, not the zigzag of P, so that a piece's rows are one block in
// every layout: a weight gradient (a sum over tokens) is then each piece's own
// GEMM over that block, the same call at any P (cp_pieces.h), and the norms'
// token shards are the pieces. Positions travel with the tokens (RoPE and the
// causal mask use global positions), so no layer but attention sees the order.
//
// Attention. A query chunk attends the key chunks at or before it, each key
// chunk one attention_forward call of c queries × c keys (the same shapes in
// every layout), and merges the partial (out, lse) by the online-softmax rule
// in ascending key-chunk order, whatever order the keys arrived in. The
// backward adds each pair's dQ into the query chunk in ascending key order; a
// pair's dK, dV are formed from zero, travel to the key chunk's owner, which
// sums them in ascending query order and then adds them to its dk, dv. The
// keys come to every rank by the ring (P − 1 hops of each rank's packed
// [k | v | pos], every block kept) or by one all-gather (parallel.cp_impl);
// the dK/dV pairs travel the same way. Contracts as context_parallel.h.
#pragma once

#include <cstdint>
#include <string_view>

#include "comm/group.h"
#include "ops/attention.h"
#include "parallel/context_parallel.h"
#include "parallel/cp_buffer_plan.h"

namespace mt::cp {

// pos[T/P] ← the global positions rank `rank` of P holds under grain C, in
// local (piece) order; T is the whole sequence.
void piece_positions(int32_t* pos, int64_t T, int C, int P, int rank);

// out[B, T/P] ← this rank's tokens of in[B, T], in piece order.
void piece_slice(int32_t* out, const int32_t* in, int64_t B, int64_t T, int C, int P, int rank);

// The buffers of a canonical call (cp_buffer_plan.h), for the local dims d.
CallPlan canonical_call_plan(const AttentionDims& d, CpImpl impl, int P, int C, Pass pass);

// Forward and backward as context_parallel.h's, over `cp` (null: one process).
void canonical_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                                 Group* cp, CpImpl impl, int C, std::string_view site);
void canonical_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                  const float* lse, const float* q, const float* k, const float* v,
                                  const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                                  Group* cp, CpImpl impl, int C, std::string_view site);

}  // namespace mt::cp

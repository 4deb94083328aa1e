// Causal grouped-query attention, blockwise with online softmax (FlashAttention
// style): the T×T score matrix is never materialised; the forward saves the
// log-sum-exp of each query's scores for the backward.
//
// Visibility is given by explicit positions: key j is visible to query i iff
// k_pos[j] <= q_pos[i]. With q_pos = k_pos = 0..T−1 this is the causal mask;
// context parallelism feeds remote key/value blocks with their global positions.
#pragma once

#include <cstdint>

#include "ops/dropout.h"

namespace mt {

// Dropout on the attention probabilities (docs/MODEL.md, "Dropout"): element
// (query, key) of head h in batch row b is kept or dropped by
// dropout_factor(key, q_pos, k_pos, head0 + h, seq[b]) — global positions,
// the global head and the global sequence, so every layout draws the same mask.
struct AttentionDropout {
  DropoutKey key;
  const int64_t* seq = nullptr;  // [B]: the global sequence index of each batch row
  int64_t head0 = 0;             // the global index of head 0 here (tensor parallelism)
};

struct AttentionDims {
  int64_t batch = 1;       // B sequences
  int64_t q_len = 0;       // Tq queries per sequence
  int64_t kv_len = 0;      // Tk keys per sequence
  int64_t n_heads = 0;     // H query heads
  int64_t n_kv_heads = 0;  // KV heads; H % KV == 0, query head h reads kv head h / (H / KV)
  int64_t head_dim = 0;    // D; scores are scaled by 1 / sqrt(D)
  int64_t q_stride = 0;    // floats between consecutive tokens of q and dq
  int64_t kv_stride = 0;   // floats between consecutive tokens of k, v, dk and dv
  int64_t out_stride = 0;  // floats between consecutive tokens of out and dout
  const AttentionDropout* dropout = nullptr;  // null: no dropout
};

// q   [B, Tq, q_stride]   head h at columns [h·D, (h+1)·D)
// k,v [B, Tk, kv_stride]  kv head g at columns [g·D, (g+1)·D)
// q_pos [B, Tq], k_pos [B, Tk]
// out [B, Tq, out_stride] (head h at [h·D, (h+1)·D)), assigned
// lse [B, H, Tq]          natural-log sum of exp(scaled scores) over visible keys;
//                         −inf (and out = 0) for a query that sees no key
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d);

// Backward. out and lse are those of the attention over *all* key blocks the
// query sees, so that several key/value blocks can be processed one at a time
// and their contributions summed: dq, dk and dv are ACCUMULATED (+=).
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d);

// Merges the attention of the same queries over another key block into (out,
// lse), by the online-softmax rule (ring attention / context parallelism):
//   lse_new = logaddexp(lse, lse_part)
//   out     = out·exp(lse − lse_new) + out_part·exp(lse_part − lse_new)
// out, out_part [B, Tq, out_stride] (head h at [h·D, (h+1)·D)); lse, lse_part
// [B, H, Tq]; both pairs as written by attention_forward. Uses batch, q_len,
// n_heads, head_dim and out_stride of d. A side with lse = −inf (no visible key)
// contributes nothing; when both are −inf, out is set to 0 and lse stays −inf.
// out/lse are updated in place; out_part/lse_part must not overlap them.
void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part,
                     const AttentionDims& d);

}  // namespace mt

// The attention core of a decoder layer as one interface: between the q|k|v
// projection and the o projection, what RoPE rotates and what the queries
// attend to. The layer (model/llama_layer.cpp) calls it; which attention runs
// is chosen by whoever builds or drives the layer, not by the layer:
//   - training and evaluation: cp::CpAttention (cp_attention.h) — local
//     attention, or under context parallelism the ring or the all-gather
//     (context_parallel.h) over the microbatch's zigzag rows;
//   - generation: infer/kv_attention.h — the rows' keys and values appended to
//     the KV cache and the queries attended to every cached position (under
//     cp by ring or all-gather over the cache's position shards).
// Both directions share the contract of ops/attention.h: forward assigns out
// and lse, backward accumulates dq, dk, dv.
#pragma once

#include <cstdint>
#include <string_view>

#include "ops/attention.h"
#include "ops/rope.h"

namespace mt {

class AttentionStrategy {
 public:
  virtual ~AttentionStrategy() = default;

  // q and k of qkv [N, QKV] (q at column 0: H heads; k at H·D: KV heads)
  // rotated in place by position, before forward. `rope` is the layer's table;
  // a strategy whose sequences need other tables (dynamic scaling, by each
  // sequence's length) or that caches keys unrotated uses its own.
  virtual void rotate(float* qkv, const int32_t* pos, const RopeTable& rope, int64_t N, int64_t H, int64_t KV,
                      int64_t QKV) = 0;
  // layer: the layer's index in its stage (what a KV cache is keyed by).
  virtual void forward(int64_t layer, float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                       std::string_view site) = 0;
  virtual void backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                        std::string_view site) = 0;
};

}  // namespace mt

// The attention a decoder layer runs in training and evaluation, chosen once
// when the model is built: local (no context parallelism), ring or all-gather
// (context_parallel.h), Ulysses or the hybrid (cp_ulysses.h). One strategy of attention_strategy.h
// (generation's is infer/kv_attention.h); RoPE rotates q and k by the layer's table.
#pragma once

#include <cstdint>
#include <string_view>

#include "comm/group.h"
#include "core/memory.h"
#include "ops/attention.h"
#include "parallel/attention_strategy.h"
#include "parallel/context_parallel.h"

namespace mt::cp {

class CpAttention final : public AttentionStrategy {
 public:
  // cp null or of size 1: local attention (impl is then irrelevant).
  // canonical_cp > 1 (the canonical mode's cp grain): the fixed key chunks of
  // cp_canonical.h at any cp size, one process included. The hybrid's two
  // sub-groups of cp (the mesh's cp_a2a and cp_ring) are `a2a` and `ring`;
  // Ulysses exchanges over cp itself.
  CpAttention(Group* cp, CpImpl impl, int64_t canonical_cp = 0, Group* a2a = nullptr, Group* ring = nullptr);

  // The most floats of kind `kind` the strategy holds in one call (a step's
  // forward or backward, one at a time) on a cp group of `cp_size` ranks, for
  // the layer's attention dims `d`: the larger of the two calls' peaks in
  // their buffer plans (cp_buffer_plan.h), 0 for local attention. What the
  // memory model counts (cost/memory_model_parts.cpp cp_floats).
  // `a2a_size`: the hybrid's all-to-all group (ulysses: cp_size).
  static int64_t peak_floats(const AttentionDims& d, CpImpl impl, int cp_size, MemKind kind,
                             int64_t canonical_cp = 0, int a2a_size = 0);

  void rotate(float* qkv, const int32_t* pos, const RopeTable& rope, int64_t N, int64_t H, int64_t KV,
              int64_t QKV) override;
  void forward(int64_t layer, float* out, float* lse, const float* q, const float* k, const float* v,
               const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
               std::string_view site) override;
  void backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                const float* q, const float* k, const float* v, const int32_t* q_pos, const int32_t* k_pos,
                const AttentionDims& d, std::string_view site) override;

  using Forward = void (*)(float*, float*, const float*, const float*, const float*, const int32_t*,
                           const int32_t*, const AttentionDims&, Group*, std::string_view);
  using Backward = void (*)(float*, float*, float*, const float*, const float*, const float*, const float*,
                            const float*, const float*, const int32_t*, const int32_t*, const AttentionDims&,
                            Group*, std::string_view);

 private:
  Group* cp_;
  CpImpl impl_;
  Group* a2a_ = nullptr;   // Ulysses' all-to-all group (null: not Ulysses)
  Group* ring_ = nullptr;  // the hybrid's ring across the a2a groups
  int canonical_ = 0;      // the cp grain, 0: off
  Forward forward_;
  Backward backward_;
};

}  // namespace mt::cp

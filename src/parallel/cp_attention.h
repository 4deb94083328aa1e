// The attention a decoder layer runs, chosen once when the model is built:
// local (no context parallelism), ring or all-gather (context_parallel.h).
// Both directions share one contract, that of ops/attention.h: the forward
// assigns out and lse, the backward accumulates dq, dk, dv.
#pragma once

#include <cstdint>
#include <string_view>

#include "comm/group.h"
#include "ops/attention.h"
#include "parallel/context_parallel.h"

namespace mt::cp {

class CpAttention {
 public:
  // cp null or of size 1: local attention (impl is then irrelevant).
  CpAttention(Group* cp, CpImpl impl);

  void forward(float* out, float* lse, const float* q, const float* k, const float* v, const int32_t* q_pos,
               const int32_t* k_pos, const AttentionDims& d, std::string_view site) const;
  void backward(float* dq, float* dk, float* dv, const float* dout, const float* out, const float* lse,
                const float* q, const float* k, const float* v, const int32_t* q_pos, const int32_t* k_pos,
                const AttentionDims& d, std::string_view site) const;

  using Forward = void (*)(float*, float*, const float*, const float*, const float*, const int32_t*,
                           const int32_t*, const AttentionDims&, Group*, std::string_view);
  using Backward = void (*)(float*, float*, float*, const float*, const float*, const float*, const float*,
                            const float*, const float*, const int32_t*, const int32_t*, const AttentionDims&,
                            Group*, std::string_view);

 private:
  Group* cp_;
  Forward forward_;
  Backward backward_;
};

}  // namespace mt::cp

// The ops of src/ops/ on the GPU: same names, argument grammar, shapes and
// assign/accumulate rules as the CPU kernels (see each header in src/ops/),
// with every pointer a device pointer. Launched on the default stream.
//
// Reductions (RMSNorm, cross-entropy, attention, the weight gradients of
// RMSNorm and embedding) run in a fixed order with no floating-point atomics,
// so a rerun gives the same bits. Temporary buffers come from the stream-ordered
// allocator (cudaMallocAsync) and are not counted by DeviceMemoryTracker.
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "ops/attention.h"

namespace mt::cuda {

// ops/embedding.h. The backward adds each id's rows in token order, as the CPU does.
void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C);

// ops/rmsnorm.h
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                     float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C);

// ops/rope.h with the table on the device: cos, sin [max_pos, head_dim / 2].
// Positions must lie in [0, max_pos) (the caller's data loader checks them).
struct RopeTableView {
  const float* cos = nullptr;
  const float* sin = nullptr;
  int64_t max_pos = 0;
  int64_t head_dim = 0;
};
// Fills cos/sin as ops/rope.h's RopeTable does (angles in double, stored as float).
void rope_table_fill(float* cos, float* sin, int64_t max_pos, int64_t head_dim, double theta);
void rope_forward(float* x, const int32_t* pos, const RopeTableView& table, int64_t N, int64_t n_heads,
                  int64_t row_stride);
void rope_backward(float* dx, const int32_t* pos, const RopeTableView& table, int64_t N, int64_t n_heads,
                   int64_t row_stride);

// ops/swiglu.h
void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F);
void swiglu_backward(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F);

// ops/cross_entropy.h (targets in [0, V) or ignore_index)
void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t N,
                           int64_t V, int32_t ignore_index);
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            float dloss, int64_t N, int64_t V, int32_t ignore_index);

// ops/attention.h; head_dim must be ≤ 128.
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d);
void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part,
                     const AttentionDims& d);

// Mixed precision on the tensor cores (docs/GPU.md, "bf16 attention"): the
// MMA operands q, k, v and dout are bf16; scores, softmax, P·V and every
// gradient accumulate in fp32; out, lse, dq, dk, dv are fp32 with the layout,
// positions, GQA and assign/accumulate rules of attention_forward/backward
// above (strides count elements of each tensor's own type), so
// attention_merge combines their outputs. head_dim must be 64 or 128 (refused
// by name otherwise). Differs from the fp32 kernels by the bf16 rounding of P
// and dS before their products (relative error ~2⁻⁸, bounds in docs/GPU.md).
void attention_forward_bf16(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                            const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d);
void attention_backward_bf16(float* dq, float* dk, float* dv, const bf16* dout, const float* out,
                             const float* lse, const bf16* q, const bf16* k, const bf16* v,
                             const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d);

// optim/adamw.h's adamw_update, element for element.
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t t);

// Precision casts for bf16 matmul inputs (round to nearest even, as core/bf16.h).
void f32_to_bf16(bf16* out, const float* in, int64_t n);
void bf16_to_f32(float* out, const bf16* in, int64_t n);

}  // namespace mt::cuda

// Shared pieces of the attention kernels (internal). Layout: a block holds
// kWarps warps; in the forward and dq kernels each warp owns one query and
// lane j scores key j of a 32-key tile held in shared memory; in the dk/dv
// kernel the roles of queries and keys swap. Each lane also owns output
// dimensions lane + 32·r (r < R = ceil(D / 32)), so D ≤ 128.
#pragma once

#include <climits>
#include <cstdint>

#include "ops/attention.h"

namespace mt::cuda::detail {

constexpr int kWarps = 8;
constexpr int kTile = 32;
constexpr int kMaxHeadDim = 128;

// Offsets of token t's head column block, as in ops/attention_reference.cpp.
__device__ __forceinline__ int64_t q_off(const AttentionDims& d, int64_t b, int64_t t, int64_t h) {
  return (b * d.q_len + t) * d.q_stride + h * d.head_dim;
}
__device__ __forceinline__ int64_t kv_off(const AttentionDims& d, int64_t b, int64_t t, int64_t g) {
  return (b * d.kv_len + t) * d.kv_stride + g * d.head_dim;
}
__device__ __forceinline__ int64_t out_off(const AttentionDims& d, int64_t b, int64_t t, int64_t h) {
  return (b * d.q_len + t) * d.out_stride + h * d.head_dim;
}

// Copies rows [t0, t0 + kTile) of one head (D floats each, zero past `len`)
// into dst with row pitch `pitch`, by all threads of the block.
__device__ __forceinline__ void load_tile(float* dst, int pitch, const float* src, int64_t row_stride,
                                          int64_t t0, int64_t len, int D) {
  for (int e = threadIdx.x; e < kTile * D; e += blockDim.x) {
    const int r = e / D, c = e - r * D;
    dst[r * pitch + c] = t0 + r < len ? src[(t0 + r) * row_stride + c] : 0.0f;
  }
}

// Dot product of two D-vectors in shared memory, in index order.
__device__ __forceinline__ float dot_shared(const float* a, const float* b, int D) {
  float s = 0.0f;
  for (int c = 0; c < D; ++c)
    s += a[c] * b[c];
  return s;
}

// Validates what the kernels support (head_dim ≤ 128, GQA grouping, strides).
void check_attention_dims(const AttentionDims& d);

}  // namespace mt::cuda::detail

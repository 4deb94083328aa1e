// Shared device helpers of src/cuda/ (internal): grid sizing and reductions in
// a fixed order. The warp reductions are xor butterflies, so every lane ends
// with the same value and a rerun adds in the same order.
#pragma once

#include <cstdint>

#include "core/error.h"

namespace mt::cuda::detail {

inline unsigned blocks_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  // Grid-stride loops cover the rest; 2^20 blocks keep every SM busy.
  return static_cast<unsigned>(b < (1 << 20) ? (b > 0 ? b : 1) : (1 << 20));
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}

// Sum (or max) over a block of blockDim.x ≤ 1024 threads, a multiple of 32;
// every thread gets the result. `scratch` holds 32 floats of shared memory.
template <bool kMax>
__device__ float block_reduce(float x, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  x = kMax ? warp_max(x) : warp_sum(x);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  float y = lane < warps ? scratch[lane] : (kMax ? -INFINITY : 0.0f);
  return kMax ? warp_max(y) : warp_sum(y);
}

}  // namespace mt::cuda::detail

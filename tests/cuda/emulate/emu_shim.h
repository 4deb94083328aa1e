// CPU emulation of the CUDA features the bf16 attention kernels use (run.sh):
// blocks run one after another, each as blockDim std::threads; __syncthreads
// and warp shuffles are barriers; __shared__ variables become function
// statics (one block at a time); mma.sync m16n8k16 is computed from the PTX
// ISA fragment layouts (see src/cuda/attention_bf16.cuh) in fp32.
#pragma once
#include <algorithm>
#include <barrier>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(x)
#define __align__(x) alignas(x)
#define __shared__ static
using std::max;
using std::min;
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
struct uint4 {
  uint32_t x, y, z, w;
};
inline uint4 make_uint4(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return {a, b, c, d};
}
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim;
inline std::barrier<>* g_block_bar;
inline std::barrier<>* g_warp_bar[32];
struct WarpSlots {
  float f[32];
  uint32_t a[32][4];
  uint32_t b[32][2];
};
inline WarpSlots g_warp[32];
alignas(16) inline unsigned char g_dyn_smem[256 * 1024];
inline void __syncthreads() {
  g_block_bar->arrive_and_wait();
}
inline void __syncwarp() {
  g_warp_bar[threadIdx.x >> 5]->arrive_and_wait();
}
inline float __shfl_xor_sync(unsigned, float x, int o) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  g_warp[w].f[l] = x;
  g_warp_bar[w]->arrive_and_wait();
  const float y = g_warp[w].f[l ^ o];
  g_warp_bar[w]->arrive_and_wait();
  return y;
}
inline float __shfl_sync(unsigned, float x, int src) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  g_warp[w].f[l] = x;
  g_warp_bar[w]->arrive_and_wait();
  const float y = g_warp[w].f[src];
  g_warp_bar[w]->arrive_and_wait();
  return y;
}
struct __nv_bfloat16 {
  uint16_t b;
};
inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  return {mt::float_to_bf16(f).bits};
}
inline uint16_t __bfloat16_as_ushort(__nv_bfloat16 h) {
  return h.b;
}
inline __nv_bfloat16 __ushort_as_bfloat16(uint16_t u) {
  return {u};
}
inline float __bfloat162float(__nv_bfloat16 h) {
  return mt::bf16_to_float(mt::bf16{h.b});
}
inline float bfl(uint32_t r, int hi) {
  return mt::bf16_to_float(mt::bf16{static_cast<uint16_t>(hi ? r >> 16 : r & 0xffff)});
}
// mma.m16n8k16 row.col bf16 -> f32, from the PTX ISA fragment layouts.
inline void mma_emul(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  for (int i = 0; i < 4; ++i)
    g_warp[w].a[l][i] = a[i];
  g_warp[w].b[l][0] = b0;
  g_warp[w].b[l][1] = b1;
  g_warp_bar[w]->arrive_and_wait();
  float A[16][16], B[16][8];
  for (int L = 0; L < 32; ++L) {
    const int g = L >> 2, t = L & 3;
    const uint32_t* ra = g_warp[w].a[L];
    A[g][2 * t] = bfl(ra[0], 0);
    A[g][2 * t + 1] = bfl(ra[0], 1);
    A[g + 8][2 * t] = bfl(ra[1], 0);
    A[g + 8][2 * t + 1] = bfl(ra[1], 1);
    A[g][2 * t + 8] = bfl(ra[2], 0);
    A[g][2 * t + 9] = bfl(ra[2], 1);
    A[g + 8][2 * t + 8] = bfl(ra[3], 0);
    A[g + 8][2 * t + 9] = bfl(ra[3], 1);
    const uint32_t* rb = g_warp[w].b[L];
    B[2 * t][g] = bfl(rb[0], 0);
    B[2 * t + 1][g] = bfl(rb[0], 1);
    B[2 * t + 8][g] = bfl(rb[1], 0);
    B[2 * t + 9][g] = bfl(rb[1], 1);
  }
  g_warp_bar[w]->arrive_and_wait();
  const int g = l >> 2, t = l & 3;
  for (int i = 0; i < 4; ++i) {
    const int row = g + 8 * (i >> 1), col = 2 * t + (i & 1);
    float s = 0;
    for (int k = 0; k < 16; ++k)
      s += A[row][k] * B[k][col];
    c[i] += s;
  }
}
enum { cudaFuncAttributeMaxDynamicSharedMemorySize = 0 };
template <class F>
int cudaFuncSetAttribute(F, int, int v) {
  return v > 227 * 1024 ? 1 : 0;
}
#define MT_CUDA_CHECK(x)                        \
  do {                                          \
    if ((x) != 0) throw std::runtime_error(#x); \
  } while (0)
#define MT_CUDA_CHECK_LAUNCH()
inline void emu_launch(dim3 grid, dim3 block, size_t smem, const std::function<void()>& body) {
  if (smem > sizeof(g_dyn_smem)) throw std::runtime_error("smem");
  blockDim = block;
  const int n = block.x, warps = n / 32;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) {
        std::memset(g_dyn_smem, 0xff, sizeof(g_dyn_smem));  // garbage: NaN-ish bf16
        std::barrier<> bb(n);
        g_block_bar = &bb;
        std::vector<std::unique_ptr<std::barrier<>>> wb;
        for (int w = 0; w < warps; ++w) {
          wb.emplace_back(new std::barrier<>(32));
          g_warp_bar[w] = wb.back().get();
        }
        std::vector<std::thread> th;
        for (int i = 0; i < n; ++i)
          th.emplace_back([&, i] {
            threadIdx = dim3(i);
            blockIdx = dim3(x, y, z);
            body();
          });
        for (auto& t : th)
          t.join();
      }
}
inline void emu_launch_args(dim3 g, int b, size_t smem, const std::function<void()>& f) {
  emu_launch(g, dim3(b), smem, f);
}
inline void emu_launch_args(dim3 g, int b, const std::function<void()>& f) {
  emu_launch(g, dim3(b), 0, f);
}
inline void emu_launch_args(unsigned g, int b, const std::function<void()>& f) {
  emu_launch(dim3(g), dim3(b), 0, f);
}

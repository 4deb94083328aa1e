// Shared pieces of the bf16 tensor-core attention kernels (internal).
//
// Warp-level MMA m16n8k16 (bf16 inputs, fp32 accumulators). Per lane, with
// g = lane / 4 and t = lane % 4, the fragments hold (PTX ISA, "mma.m16n8k16"):
//   A 16×16 (row-major): a[0] = (row g,   cols 2t, 2t+1)   a[1] = (row g+8, cols 2t, 2t+1)
//                        a[2] = (row g,   cols 2t+8, +9)   a[3] = (row g+8, cols 2t+8, +9)
//   B 16×8  (k × n):     b[0] = (k 2t, 2t+1; col n = g)    b[1] = (k 2t+8, 2t+9; col g)
//   C 16×8  (fp32):      c[0], c[1] = (row g, cols 2t, 2t+1)   c[2], c[3] = (row g+8, same cols)
// Each 32-bit register packs two bf16, the lower index in the lower half.
// The C fragments of two adjacent 8-column blocks are, once rounded to bf16,
// the A fragment of the next product over those 16 columns (FlashAttention-2).
//
// Tiles in shared memory hold bf16 as uint16_t. A "row tile" is 64 tokens ×
// D values with pitch D + 8; a "transposed tile" is D values × 64 tokens with
// pitch 72. Both paddings make the fragment reads conflict-free (8 rows g × 4
// lanes t land on 32 distinct banks) and keep every row 16-byte aligned.
#pragma once

#include <cuda_bf16.h>

#include <climits>
#include <cstdint>

#include "ops/attention.h"

namespace mt::cuda::detail {

constexpr int kBlk = 64;      // queries per block and keys per tile (or the reverse)
constexpr int kBlkWarps = 4;  // each warp owns 16 rows of the block
constexpr int kTPitch = kBlk + 8;

template <int D>
__host__ __device__ constexpr int row_pitch() {
  return D + 8;
}

__device__ __forceinline__ uint32_t ld32(const uint16_t* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const uint32_t l = __bfloat16_as_ushort(__float2bfloat16_rn(lo));
  const uint32_t h = __bfloat16_as_ushort(__float2bfloat16_rn(hi));
  return l | (h << 16);
}

// c += a · b on the tensor cores.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// A fragment of rows [r0, r0 + 16) and columns [k0, k0 + 16) of a tile with
// row-contiguous storage and pitch P.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* s, int P, int r0, int k0) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const uint16_t* p = s + (r0 + g) * P + k0 + 2 * t;
  a[0] = ld32(p);
  a[1] = ld32(p + 8 * P);
  a[2] = ld32(p + 8);
  a[3] = ld32(p + 8 * P + 8);
}

// The B operand (k × n) = rows [n0, n0 + 8) of a tile read as columns, k
// running along the row from k0: B[k][n] = s[(n0 + n)·P + k0 + k].
__device__ __forceinline__ void mma_tile(float (&c)[4], const uint32_t (&a)[4], const uint16_t* s, int P,
                                         int n0, int k0) {
  const int g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const uint16_t* p = s + (n0 + g) * P + k0 + 2 * t;
  mma_bf16(c, a, ld32(p), ld32(p + 8));
}

// The A fragment over columns [16·kc, 16·kc + 16) of C fragments c[0..] (8 columns each).
template <int N>
__device__ __forceinline__ void c_to_a(uint32_t (&a)[4], const float (&c)[N][4], int kc) {
  a[0] = pack_bf16(c[2 * kc][0], c[2 * kc][1]);
  a[1] = pack_bf16(c[2 * kc][2], c[2 * kc][3]);
  a[2] = pack_bf16(c[2 * kc + 1][0], c[2 * kc + 1][1]);
  a[3] = pack_bf16(c[2 * kc + 1][2], c[2 * kc + 1][3]);
}

// Eight bf16 at p; kVec: one 16-byte load (p 16-byte aligned).
template <bool kVec>
__device__ __forceinline__ uint4 load8(const uint16_t* p) {
  if constexpr (kVec) {
    return *reinterpret_cast<const uint4*>(p);
  } else {
    uint32_t w[4];
#pragma unroll
    for (int u = 0; u < 4; ++u)
      w[u] = static_cast<uint32_t>(p[2 * u]) | (static_cast<uint32_t>(p[2 * u + 1]) << 16);
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// Copies rows [t0, t0 + 64) of one head (D bf16 each, zero past `len`) from
// src (row r at src + r·stride) by all threads of the block, into a row tile
// (`rows`, may be null) and/or a transposed tile (`cols`, may be null).
template <int D, bool kVec>
__device__ void load_tile_bf16(uint16_t* rows, uint16_t* cols, const uint16_t* src, int64_t stride,
                               int64_t t0, int64_t len) {
  constexpr int kChunks = D / 8;
  // Row tiles only: consecutive lanes read consecutive 16 bytes of a row
  // (coalesced). With a transposed tile, consecutive lanes take consecutive
  // rows, so that its 2-byte stores land in distinct banks.
  const bool by_row = cols != nullptr;
  for (int e = threadIdx.x; e < kBlk * kChunks; e += blockDim.x) {
    const int r = by_row ? e % kBlk : e / kChunks;
    const int c = by_row ? (e / kBlk) * 8 : (e % kChunks) * 8;
    const uint4 x = t0 + r < len ? load8<kVec>(src + (t0 + r) * stride + c) : make_uint4(0, 0, 0, 0);
    if (rows != nullptr) *reinterpret_cast<uint4*>(rows + r * row_pitch<D>() + c) = x;
    if (cols != nullptr) {
      const uint32_t w[4] = {x.x, x.y, x.z, x.w};
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        cols[(c + 2 * u) * kTPitch + r] = static_cast<uint16_t>(w[u] & 0xffffu);
        cols[(c + 2 * u + 1) * kTPitch + r] = static_cast<uint16_t>(w[u] >> 16);
      }
    }
  }
}

// Minimum / maximum of 64 positions in shared memory (same value in every thread).
__device__ __forceinline__ int min64(const int* s) {
  int m = INT_MAX;
  for (int j = 0; j < kBlk; ++j)
    m = min(m, s[j]);
  return m;
}
__device__ __forceinline__ int max64(const int* s) {
  int m = INT_MIN;
  for (int j = 0; j < kBlk; ++j)
    m = max(m, s[j]);
  return m;
}

// Sum / max over the 4 lanes of a quad (the lanes holding one C-fragment row);
// xor butterflies, so all four get the same bits.
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}

// Validates the bf16 path's extra rule: head_dim 64 or 128.
void check_attention_bf16_dims(const AttentionDims& d);

// Whether every row of the given tensors can be read with 16-byte loads.
bool rows_aligned16(const void* p, int64_t stride);

}  // namespace mt::cuda::detail

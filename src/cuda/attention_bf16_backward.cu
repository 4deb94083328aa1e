// bf16 tensor-core attention backward without atomics (docs/GPU.md), as the
// fp32 path: delta = rowsum(dout ∘ out), then
//   dq kernel  (block: 64 queries of (b, h); 16 per warp; keys in tiles of 64)
//     S = Q·Kᵀ, dP = dO·Vᵀ, P = exp(scale·S − lse), dS = P∘(dP − delta)·scale,
//     dQ += dS·K
//   dkv kernel (block: 64 keys of (b, kv head); 16 per warp; the group's query
//     heads, queries in tiles of 64 taken 32 at a time)
//     Sᵀ = K·Qᵀ, dPᵀ = V·dOᵀ, Pᵀ and dSᵀ as above, dV += Pᵀ·dO, dK += dSᵀ·Q
// P and dS are rounded to bf16 as MMA operands; everything else is fp32. Each
// output element has one owner lane that adds in a fixed order.
#include <cmath>
#include <cstdint>

#include "cuda/attention.cuh"
#include "cuda/attention_bf16.cuh"
#include "cuda/check.h"
#include "cuda/launch.cuh"
#include "cuda/ops.h"
#include "cuda/scratch.cuh"

namespace mt::cuda {
namespace {

using namespace detail;

__global__ void delta_bf16_kernel(float* delta, const uint16_t* dout, const float* out, AttentionDims d) {
  const int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= d.batch * d.n_heads * d.q_len) return;
  const int64_t i = w % d.q_len, h = (w / d.q_len) % d.n_heads, b = w / (d.q_len * d.n_heads);
  const int64_t o = out_off(d, b, i, h);
  float s = 0.0f;
  for (int64_t c = lane; c < d.head_dim; c += 32)
    s += __bfloat162float(__ushort_as_bfloat16(dout[o + c])) * out[o + c];
  s = warp_sum(s);
  if (lane == 0) delta[w] = s;
}

// P and dS·scale of one C-fragment element: visible iff k_pos ≤ q_pos; a
// query with lse = −inf has q_pos = INT_MIN here, so it sees nothing.
__device__ __forceinline__ void grad_scores(float& s, float& dp, bool visible, float lse, float delta,
                                            float scale) {
  const float p = visible ? expf(s * scale - lse) : 0.0f;
  s = p;
  dp = p * (dp - delta) * scale;
}

// Loads the per-query rows of one query tile: positions (INT_MIN past Tq or
// where lse = −inf), lse and delta. By threads 0..63.
__device__ __forceinline__ void load_query_rows(int* qpos, float* lse_s, float* delta_s, const int32_t* q_pos,
                                                const float* lse, const float* delta, const AttentionDims& d,
                                                int64_t b, int64_t h, int64_t t0) {
  if (threadIdx.x >= kBlk) return;
  const int64_t i = t0 + threadIdx.x, row = (b * d.n_heads + h) * d.q_len + i;
  const bool in = i < d.q_len;
  const float L = in ? lse[row] : -INFINITY;
  lse_s[threadIdx.x] = L;
  delta_s[threadIdx.x] = in ? delta[row] : 0.0f;
  qpos[threadIdx.x] = in && L != -INFINITY ? q_pos[b * d.q_len + i] : INT_MIN;
}

template <int D, bool kVec>
__global__ void __launch_bounds__(kBlkWarps * 32)
    attention_bf16_dq_kernel(float* dq, const uint16_t* dout, const float* lse, const float* delta,
                             const uint16_t* q, const uint16_t* k, const uint16_t* v, const int32_t* q_pos,
                             const int32_t* k_pos, AttentionDims d, float scale) {
  constexpr int P = row_pitch<D>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);  // row tiles
  uint16_t* Os = Qs + kBlk * P;                          // dout
  uint16_t* Ks = Os + kBlk * P;
  uint16_t* Vs = Ks + kBlk * P;
  uint16_t* Kt = Vs + kBlk * P;  // transposed tile
  __shared__ int qpos[kBlk], kpos[kBlk];
  __shared__ float lse_s[kBlk], delta_s[kBlk];
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const int64_t b = blockIdx.z, h = blockIdx.y, kvh = h / (d.n_heads / d.n_kv_heads);
  const int64_t q0 = int64_t{blockIdx.x} * kBlk;
  load_query_rows(qpos, lse_s, delta_s, q_pos, lse, delta, d, b, h, q0);
  load_tile_bf16<D, kVec>(Qs, nullptr, q + q_off(d, b, 0, h), d.q_stride, q0, d.q_len);
  load_tile_bf16<D, kVec>(Os, nullptr, dout + out_off(d, b, 0, h), d.out_stride, q0, d.q_len);
  __syncthreads();
  const int qmax = max64(qpos), r0 = warp * 16 + g;
  float acc[D / 8][4] = {};
  for (int64_t t0 = 0; t0 < d.kv_len; t0 += kBlk) {
    __syncthreads();
    if (threadIdx.x < kBlk)
      kpos[threadIdx.x] = t0 + threadIdx.x < d.kv_len ? k_pos[b * d.kv_len + t0 + threadIdx.x] : INT_MAX;
    __syncthreads();
    if (min64(kpos) > qmax) continue;
    load_tile_bf16<D, kVec>(Ks, Kt, k + kv_off(d, b, 0, kvh), d.kv_stride, t0, d.kv_len);
    load_tile_bf16<D, kVec>(Vs, nullptr, v + kv_off(d, b, 0, kvh), d.kv_stride, t0, d.kv_len);
    __syncthreads();
    float s[8][4] = {}, dp[8][4] = {};
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t aq[4], ao[4];
      load_a(aq, Qs, P, warp * 16, kc * 16);
      load_a(ao, Os, P, warp * 16, kc * 16);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        mma_tile(s[j], aq, Ks, P, 8 * j, kc * 16);
        mma_tile(dp[j], ao, Vs, P, 8 * j, kc * 16);
      }
    }
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int r = r0 + 8 * (c >> 1);  // rows g (c = 0, 1) and g + 8 (c = 2, 3)
        const bool visible = kpos[8 * j + 2 * t + (c & 1)] <= qpos[r];
        grad_scores(s[j][c], dp[j][c], visible, lse_s[r], delta_s[r], scale);
      }
#pragma unroll
    for (int kc = 0; kc < kBlk / 16; ++kc) {
      uint32_t a[4];
      c_to_a(a, dp, kc);
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb)
        mma_tile(acc[nb], a, Kt, kTPitch, 8 * nb, kc * 16);
    }
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int64_t i = q0 + r0 + 8 * (c >> 1);
    if (i >= d.q_len) continue;
    float* row = dq + q_off(d, b, i, h);
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb)
      row[8 * nb + 2 * t + (c & 1)] += acc[nb][c];
  }
}

// One query tile of the dkv kernel for the warp's 16 keys (rows r0, r0 + 8 of
// the lane): 32 queries at a time, Sᵀ and dPᵀ in fragments, then dV and dK.
template <int D>
__device__ __forceinline__ void dkv_tile(float (&dk)[D / 8][4], float (&dv)[D / 8][4], const uint16_t* Ks,
                                         const uint16_t* Vs, const uint16_t* Qs, const uint16_t* Os,
                                         const uint16_t* Qt, const uint16_t* Ot, const int* qpos,
                                         const float* lse_s, const float* delta_s, const int (&kp)[2],
                                         float scale) {
  constexpr int P = row_pitch<D>();
  const int warp = threadIdx.x >> 5, t = threadIdx.x & 3;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int n0 = 32 * half;
    float s[4][4] = {}, dp[4][4] = {};
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t ak[4], av[4];
      load_a(ak, Ks, P, warp * 16, kc * 16);
      load_a(av, Vs, P, warp * 16, kc * 16);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        mma_tile(s[j], ak, Qs, P, n0 + 8 * j, kc * 16);
        mma_tile(dp[j], av, Os, P, n0 + 8 * j, kc * 16);
      }
    }
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int i = n0 + 8 * j + 2 * t + (c & 1);  // the query of this element
        grad_scores(s[j][c], dp[j][c], kp[c >> 1] <= qpos[i], lse_s[i], delta_s[i], scale);
      }
#pragma unroll
    for (int kc = 0; kc < 2; ++kc) {
      uint32_t ap[4], ads[4];
      c_to_a(ap, s, kc);
      c_to_a(ads, dp, kc);
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb) {
        mma_tile(dv[nb], ap, Ot, kTPitch, 8 * nb, n0 + 16 * kc);
        mma_tile(dk[nb], ads, Qt, kTPitch, 8 * nb, n0 + 16 * kc);
      }
    }
  }
}

template <int D, bool kVec>
__global__ void __launch_bounds__(kBlkWarps * 32)
    attention_bf16_dkv_kernel(float* dk, float* dv, const uint16_t* dout, const float* lse,
                              const float* delta, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                              const int32_t* q_pos, const int32_t* k_pos, AttentionDims d, float scale) {
  constexpr int P = row_pitch<D>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* Ks = reinterpret_cast<uint16_t*>(smem_raw);  // row tiles
  uint16_t* Vs = Ks + kBlk * P;
  uint16_t* Qs = Vs + kBlk * P;
  uint16_t* Os = Qs + kBlk * P;  // dout
  uint16_t* Qt = Os + kBlk * P;  // transposed tiles
  uint16_t* Ot = Qt + D * kTPitch;
  __shared__ int qpos[kBlk], kpos[kBlk];
  __shared__ float lse_s[kBlk], delta_s[kBlk];
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const int64_t b = blockIdx.z, kvh = blockIdx.y, group = d.n_heads / d.n_kv_heads;
  const int64_t j0 = int64_t{blockIdx.x} * kBlk;
  if (threadIdx.x < kBlk)
    kpos[threadIdx.x] = j0 + threadIdx.x < d.kv_len ? k_pos[b * d.kv_len + j0 + threadIdx.x] : INT_MAX;
  load_tile_bf16<D, kVec>(Ks, nullptr, k + kv_off(d, b, 0, kvh), d.kv_stride, j0, d.kv_len);
  load_tile_bf16<D, kVec>(Vs, nullptr, v + kv_off(d, b, 0, kvh), d.kv_stride, j0, d.kv_len);
  __syncthreads();
  const int kmin = min64(kpos), r0 = warp * 16 + g;
  const int kp[2] = {kpos[r0], kpos[r0 + 8]};
  float ak[D / 8][4] = {}, av[D / 8][4] = {};
  for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
    for (int64_t t0 = 0; t0 < d.q_len; t0 += kBlk) {
      __syncthreads();
      load_query_rows(qpos, lse_s, delta_s, q_pos, lse, delta, d, b, h, t0);
      __syncthreads();
      if (max64(qpos) < kmin) continue;  // uniform: no query of this tile sees a key of the block
      load_tile_bf16<D, kVec>(Qs, Qt, q + q_off(d, b, 0, h), d.q_stride, t0, d.q_len);
      load_tile_bf16<D, kVec>(Os, Ot, dout + out_off(d, b, 0, h), d.out_stride, t0, d.q_len);
      __syncthreads();
      dkv_tile<D>(ak, av, Ks, Vs, Qs, Os, Qt, Ot, qpos, lse_s, delta_s, kp, scale);
    }
  }
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    const int64_t j = j0 + r0 + 8 * (c >> 1);
    if (j >= d.kv_len) continue;
    const int64_t o = kv_off(d, b, j, kvh) + 2 * t + (c & 1);
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) {
      dk[o + 8 * nb] += ak[nb][c];
      dv[o + 8 * nb] += av[nb][c];
    }
  }
}

template <int D, bool kVec>
void launch_backward_bf16(float* dq, float* dk, float* dv, const uint16_t* dout, const float* lse,
                          const float* delta, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                          const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  constexpr int P = row_pitch<D>();
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  const size_t dq_smem = sizeof(uint16_t) * static_cast<size_t>(4 * kBlk * P + D * kTPitch);
  const size_t dkv_smem = sizeof(uint16_t) * static_cast<size_t>(4 * kBlk * P + 2 * D * kTPitch);
  auto* dq_kernel = attention_bf16_dq_kernel<D, kVec>;
  auto* dkv_kernel = attention_bf16_dkv_kernel<D, kVec>;
  MT_CUDA_CHECK(cudaFuncSetAttribute(dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(dq_smem)));
  MT_CUDA_CHECK(cudaFuncSetAttribute(dkv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(dkv_smem)));
  if (d.q_len > 0) {
    const dim3 grid(static_cast<unsigned>((d.q_len + kBlk - 1) / kBlk), static_cast<unsigned>(d.n_heads),
                    static_cast<unsigned>(d.batch));
    dq_kernel<<<grid, kBlkWarps * 32, dq_smem>>>(dq, dout, lse, delta, q, k, v, q_pos, k_pos, d, scale);
    MT_CUDA_CHECK_LAUNCH();
  }
  if (d.kv_len > 0) {
    const dim3 grid(static_cast<unsigned>((d.kv_len + kBlk - 1) / kBlk), static_cast<unsigned>(d.n_kv_heads),
                    static_cast<unsigned>(d.batch));
    dkv_kernel<<<grid, kBlkWarps * 32, dkv_smem>>>(dk, dv, dout, lse, delta, q, k, v, q_pos, k_pos, d, scale);
    MT_CUDA_CHECK_LAUNCH();
  }
}

template <int D>
void backward_bf16(float* dq, float* dk, float* dv, const uint16_t* dout, const float* lse,
                   const float* delta, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                   const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  if (rows_aligned16(q, d.q_stride) && rows_aligned16(k, d.kv_stride) && rows_aligned16(v, d.kv_stride) &&
      rows_aligned16(dout, d.out_stride))
    launch_backward_bf16<D, true>(dq, dk, dv, dout, lse, delta, q, k, v, q_pos, k_pos, d);
  else
    launch_backward_bf16<D, false>(dq, dk, dv, dout, lse, delta, q, k, v, q_pos, k_pos, d);
}

}  // namespace

void attention_backward_bf16(float* dq, float* dk, float* dv, const bf16* dout, const float* out,
                             const float* lse, const bf16* q, const bf16* k, const bf16* v,
                             const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  check_attention_bf16_dims(d);
  const int64_t rows = d.batch * d.n_heads * d.q_len;
  if (d.batch == 0) return;
  const auto* doh = reinterpret_cast<const uint16_t*>(dout);
  Scratch<float> delta(rows);
  if (rows > 0) {
    MT_CHECK(rows * 32 / 256 < (1 << 20), "attention_backward_bf16: ", rows, " rows exceed one grid");
    delta_bf16_kernel<<<blocks_for(rows * 32, 256), 256>>>(delta.get(), doh, out, d);
    MT_CUDA_CHECK_LAUNCH();
  }
  const auto* qh = reinterpret_cast<const uint16_t*>(q);
  const auto* kh = reinterpret_cast<const uint16_t*>(k);
  const auto* vh = reinterpret_cast<const uint16_t*>(v);
  if (d.head_dim == 64)
    backward_bf16<64>(dq, dk, dv, doh, lse, delta.get(), qh, kh, vh, q_pos, k_pos, d);
  else
    backward_bf16<128>(dq, dk, dv, doh, lse, delta.get(), qh, kh, vh, q_pos, k_pos, d);
}

}  // namespace mt::cuda

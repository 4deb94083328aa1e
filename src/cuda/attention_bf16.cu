// bf16 tensor-core attention forward (FlashAttention-2 style, docs/GPU.md).
// Block: 64 queries of one (batch b, head h), 4 warps of 16 queries each;
// grid (ceil(Tq / 64), H, B). The block's queries sit in shared memory; keys
// and values come in tiles of 64 (values transposed). Per tile each warp
//   S = Q·Kᵀ          16 × 64 scores, fp32 accumulators, D / 16 MMA steps
//   online softmax    in fp32 on S's fragments; P rounded to bf16
//   O += P·V          16 × D, fp32, P taken straight from S's fragments
// Each lane owns two query rows (g, g + 8) of its warp; the row max and sum
// are reduced over the row's quad of lanes by xor shuffles.
#include <cmath>
#include <cstdint>

#include "cuda/attention.cuh"
#include "cuda/attention_bf16.cuh"
#include "cuda/check.h"
#include "cuda/ops.h"

namespace mt::cuda {
namespace {

using namespace detail;

// Softmax of one tile for the lane's two rows: masks s by position, updates the
// running max m and lane-partial sum l, rescales o, and leaves P (fp32) in s.
template <int D>
__device__ __forceinline__ void online_softmax(float (&s)[8][4], float (&o)[D / 8][4], float (&m)[2],
                                               float (&l)[2], const int (&qp)[2], const int* kpos,
                                               float scale) {
  const int t = threadIdx.x & 3;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const bool visible = kpos[8 * j + 2 * t + e] <= qp[r];
        s[j][2 * r + e] = visible ? s[j][2 * r + e] * scale : -INFINITY;
        mx = fmaxf(mx, s[j][2 * r + e]);
      }
    const float m_new = fmaxf(m[r], quad_max(mx));
    // No visible key for this row yet: P = 0 and nothing to rescale.
    const float corr = m_new == -INFINITY ? 1.0f : expf(m[r] - m_new);  // 0 when m = −inf
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float p = m_new == -INFINITY ? 0.0f : expf(s[j][2 * r + e] - m_new);  // masked: exp(−inf) = 0
        s[j][2 * r + e] = p;
        sum += p;
      }
    l[r] = l[r] * corr + sum;
    m[r] = m_new;
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) {
      o[nb][2 * r] *= corr;
      o[nb][2 * r + 1] *= corr;
    }
  }
}

template <int D, bool kVec>
__global__ void __launch_bounds__(kBlkWarps * 32)
    attention_bf16_forward_kernel(float* out, float* lse, const uint16_t* q, const uint16_t* k,
                                  const uint16_t* v, const int32_t* q_pos, const int32_t* k_pos,
                                  AttentionDims d, float scale) {
  constexpr int P = row_pitch<D>();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* Qs = reinterpret_cast<uint16_t*>(smem_raw);  // row tile: the block's queries
  uint16_t* Ks = Qs + kBlk * P;                          // row tile: keys of the current tile
  uint16_t* Vt = Ks + kBlk * P;                          // transposed tile: values
  __shared__ int qpos[kBlk], kpos[kBlk];
  const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;
  const int64_t b = blockIdx.z, h = blockIdx.y, kvh = h / (d.n_heads / d.n_kv_heads);
  const int64_t q0 = int64_t{blockIdx.x} * kBlk;
  if (threadIdx.x < kBlk)
    qpos[threadIdx.x] = q0 + threadIdx.x < d.q_len ? q_pos[b * d.q_len + q0 + threadIdx.x] : INT_MIN;
  load_tile_bf16<D, kVec>(Qs, nullptr, q + q_off(d, b, 0, h), d.q_stride, q0, d.q_len);
  __syncthreads();
  const int qmax = max64(qpos);
  const int qp[2] = {qpos[warp * 16 + g], qpos[warp * 16 + g + 8]};
  float o[D / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  for (int64_t t0 = 0; t0 < d.kv_len; t0 += kBlk) {
    __syncthreads();  // the previous tile is consumed
    if (threadIdx.x < kBlk)
      kpos[threadIdx.x] = t0 + threadIdx.x < d.kv_len ? k_pos[b * d.kv_len + t0 + threadIdx.x] : INT_MAX;
    __syncthreads();
    if (min64(kpos) > qmax) continue;  // uniform: no key of this tile is visible to the block
    load_tile_bf16<D, kVec>(Ks, nullptr, k + kv_off(d, b, 0, kvh), d.kv_stride, t0, d.kv_len);
    load_tile_bf16<D, kVec>(nullptr, Vt, v + kv_off(d, b, 0, kvh), d.kv_stride, t0, d.kv_len);
    __syncthreads();
    float s[8][4] = {};
#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      uint32_t a[4];
      load_a(a, Qs, P, warp * 16, kc * 16);
#pragma unroll
      for (int j = 0; j < 8; ++j)
        mma_tile(s[j], a, Ks, P, 8 * j, kc * 16);
    }
    online_softmax<D>(s, o, m, l, qp, kpos, scale);
#pragma unroll
    for (int kc = 0; kc < kBlk / 16; ++kc) {
      uint32_t a[4];
      c_to_a(a, s, kc);
#pragma unroll
      for (int nb = 0; nb < D / 8; ++nb)
        mma_tile(o[nb], a, Vt, kTPitch, 8 * nb, kc * 16);
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float sum = quad_sum(l[r]);
    const int64_t i = q0 + warp * 16 + g + 8 * r;
    if (i >= d.q_len) continue;
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    float* orow = out + out_off(d, b, i, h);
#pragma unroll
    for (int nb = 0; nb < D / 8; ++nb) {
      orow[8 * nb + 2 * t] = o[nb][2 * r] * inv;
      orow[8 * nb + 2 * t + 1] = o[nb][2 * r + 1] * inv;
    }
    if (t == 0) lse[(b * d.n_heads + h) * d.q_len + i] = sum > 0.0f ? m[r] + logf(sum) : -INFINITY;
  }
}

template <int D, bool kVec>
void launch_forward_bf16(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                         const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  constexpr int P = row_pitch<D>();
  const size_t smem = sizeof(uint16_t) * static_cast<size_t>(2 * kBlk * P + D * kTPitch);
  auto* kernel = attention_bf16_forward_kernel<D, kVec>;
  MT_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((d.q_len + kBlk - 1) / kBlk), static_cast<unsigned>(d.n_heads),
                  static_cast<unsigned>(d.batch));
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  kernel<<<grid, kBlkWarps * 32, smem>>>(out, lse, q, k, v, q_pos, k_pos, d, scale);
  MT_CUDA_CHECK_LAUNCH();
}

template <int D>
void forward_bf16(float* out, float* lse, const uint16_t* q, const uint16_t* k, const uint16_t* v,
                  const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  if (rows_aligned16(q, d.q_stride) && rows_aligned16(k, d.kv_stride) && rows_aligned16(v, d.kv_stride))
    launch_forward_bf16<D, true>(out, lse, q, k, v, q_pos, k_pos, d);
  else
    launch_forward_bf16<D, false>(out, lse, q, k, v, q_pos, k_pos, d);
}

}  // namespace

void detail::check_attention_bf16_dims(const AttentionDims& d) {
  check_attention_dims(d);
  MT_REQUIRE(d.head_dim == 64 || d.head_dim == 128, ConfigError, "head_dim (", d.head_dim,
             ") must be 64 or 128 for the bf16 attention kernels");
}

bool detail::rows_aligned16(const void* p, int64_t stride) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && stride % 8 == 0;
}

void attention_forward_bf16(float* out, float* lse, const bf16* q, const bf16* k, const bf16* v,
                            const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  check_attention_bf16_dims(d);
  if (d.batch * d.q_len == 0) return;
  const auto* qh = reinterpret_cast<const uint16_t*>(q);
  const auto* kh = reinterpret_cast<const uint16_t*>(k);
  const auto* vh = reinterpret_cast<const uint16_t*>(v);
  if (d.head_dim == 64)
    forward_bf16<64>(out, lse, qh, kh, vh, q_pos, k_pos, d);
  else
    forward_bf16<128>(out, lse, qh, kh, vh, q_pos, k_pos, d);
}

}  // namespace mt::cuda

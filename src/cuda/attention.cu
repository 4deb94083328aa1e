// Attention forward (blockwise, online softmax, LSE saved) and the merge of
// two partial attentions. See attention.cuh for the thread layout.
#include <cmath>

#include "cuda/attention.cuh"
#include "cuda/check.h"
#include "cuda/launch.cuh"
#include "cuda/ops.h"

namespace mt::cuda {
namespace {

using namespace detail;

// Block: kWarps queries of one (batch b, head h); grid (ceil(Tq / kWarps), H, B).
template <int R>
__global__ void __launch_bounds__(kWarps * 32)
    attention_forward_kernel(float* out, float* lse, const float* q, const float* k, const float* v,
                             const int32_t* q_pos, const int32_t* k_pos, AttentionDims d, float scale) {
  extern __shared__ float smem[];
  const int D = static_cast<int>(d.head_dim);
  const int kpitch = D + 1;  // padded: lane j reads row j of K
  float* Ks = smem;
  float* Vs = Ks + kTile * kpitch;
  float* Qs = Vs + kTile * D;
  __shared__ int kpos[kTile];
  __shared__ int qmax_s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t b = blockIdx.z, h = blockIdx.y;
  const int64_t g = h / (d.n_heads / d.n_kv_heads);
  const int64_t i = int64_t{blockIdx.x} * kWarps + warp;
  const bool active = i < d.q_len;
  const int qp = active ? q_pos[b * d.q_len + i] : INT_MIN;
  float* qrow = Qs + warp * D;
  for (int c = lane; c < D; c += 32)
    qrow[c] = active ? q[q_off(d, b, i, h) + c] : 0.0f;
  if (threadIdx.x == 0) qmax_s = INT_MIN;
  __syncthreads();
  if (lane == 0) atomicMax(&qmax_s, qp);  // integer max: order-free, exact
  float m = -INFINITY, l = 0.0f, acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    acc[r] = 0.0f;
  for (int64_t t0 = 0; t0 < d.kv_len; t0 += kTile) {
    __syncthreads();  // the previous tile is consumed; qmax_s is final
    if (threadIdx.x < kTile)
      kpos[threadIdx.x] = t0 + threadIdx.x < d.kv_len ? k_pos[b * d.kv_len + t0 + threadIdx.x] : INT_MAX;
    __syncthreads();
    bool any = false;
    for (int j = 0; j < kTile; ++j)
      any |= kpos[j] <= qmax_s;
    if (!any) continue;  // uniform across the block: no key of this tile is visible
    load_tile(Ks, kpitch, k + kv_off(d, b, 0, g), d.kv_stride, t0, d.kv_len, D);
    load_tile(Vs, D, v + kv_off(d, b, 0, g), d.kv_stride, t0, d.kv_len, D);
    __syncthreads();
    const bool visible = kpos[lane] <= qp;
    const float s = visible ? dot_shared(qrow, Ks + lane * kpitch, D) * scale : -INFINITY;
    const float m_new = fmaxf(m, warp_max(s));
    if (m_new == -INFINITY) continue;  // this query has seen no key yet
    const float p = visible ? expf(s - m_new) : 0.0f;
    const float corr = expf(m - m_new);  // 0 when m = −inf
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int r = 0; r < R; ++r)
      acc[r] *= corr;
    for (int j = 0; j < kTile; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int c = lane + 32 * r;
        if (c < D) acc[r] += pj * Vs[j * D + c];
      }
    }
    m = m_new;
  }
  if (!active) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int c = lane + 32 * r;
    if (c < D) out[out_off(d, b, i, h) + c] = acc[r] * inv;
  }
  if (lane == 0) lse[(b * d.n_heads + h) * d.q_len + i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

// One warp per (b, h, query): the online-softmax merge of ops/attention.h.
__global__ void attention_merge_kernel(float* out, float* lse, const float* out_part, const float* lse_part,
                                       AttentionDims d) {
  const int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= d.batch * d.n_heads * d.q_len) return;
  const int64_t i = w % d.q_len, h = (w / d.q_len) % d.n_heads, b = w / (d.q_len * d.n_heads);
  const float a = lse[w], p = lse_part[w];
  const float n = fmaxf(a, p);
  float wa = 0.0f, wp = 0.0f, l = -INFINITY;
  if (n != -INFINITY) {
    const float ea = expf(a - n), ep = expf(p - n);
    l = n + logf(ea + ep);
    wa = expf(a - l);
    wp = expf(p - l);
  }
  const int64_t o = out_off(d, b, i, h);
  for (int64_t c = lane; c < d.head_dim; c += 32)
    out[o + c] = n == -INFINITY ? 0.0f : out[o + c] * wa + out_part[o + c] * wp;
  __syncwarp();
  if (lane == 0) lse[w] = l;
}

template <int R>
void launch_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                    const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  const int D = static_cast<int>(d.head_dim);
  const size_t smem = sizeof(float) * static_cast<size_t>(kTile * (D + 1) + kTile * D + kWarps * D);
  MT_CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  const dim3 grid(static_cast<unsigned>((d.q_len + kWarps - 1) / kWarps), static_cast<unsigned>(d.n_heads),
                  static_cast<unsigned>(d.batch));
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  attention_forward_kernel<R><<<grid, kWarps * 32, smem>>>(out, lse, q, k, v, q_pos, k_pos, d, scale);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void detail::check_attention_dims(const AttentionDims& d) {
  MT_REQUIRE(d.head_dim > 0 && d.head_dim <= kMaxHeadDim, ConfigError, "head_dim (", d.head_dim,
             ") must be in [1, ", kMaxHeadDim, "] for the CUDA attention kernels");
  MT_REQUIRE(d.n_kv_heads > 0 && d.n_heads % d.n_kv_heads == 0, ConfigError, "n_heads (", d.n_heads,
             ") must be a multiple of n_kv_heads (", d.n_kv_heads, ")");
  MT_CHECK(d.n_heads * d.head_dim <= d.q_stride && d.n_heads * d.head_dim <= d.out_stride &&
               d.n_kv_heads * d.head_dim <= d.kv_stride,
           "attention strides too small");
  MT_CHECK(d.n_heads <= 65535 && d.batch <= 65535, "attention grid: ", d.n_heads, " heads, batch ", d.batch);
}

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  check_attention_dims(d);
  if (d.batch * d.q_len == 0) return;
  switch ((d.head_dim + 31) / 32) {
    case 1:
      return launch_forward<1>(out, lse, q, k, v, q_pos, k_pos, d);
    case 2:
      return launch_forward<2>(out, lse, q, k, v, q_pos, k_pos, d);
    case 3:
      return launch_forward<3>(out, lse, q, k, v, q_pos, k_pos, d);
    default:
      return launch_forward<4>(out, lse, q, k, v, q_pos, k_pos, d);
  }
}

void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part,
                     const AttentionDims& d) {
  const int64_t warps = d.batch * d.n_heads * d.q_len;
  if (warps == 0) return;
  MT_CHECK(warps * 32 / 256 < (1 << 20), "attention_merge: ", warps, " rows exceed one grid");
  attention_merge_kernel<<<blocks_for(warps * 32, 256), 256>>>(out, lse, out_part, lse_part, d);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda

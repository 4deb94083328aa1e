// Attention backward without atomics, in three kernels:
//   delta[b, h, i] = ⟨dout_i, out_i⟩
//   dq kernel  (warp per query, keys in tiles):   dq_i += scale · Σ_j dS_ij k_j
//   dkv kernel (warp per key, queries in tiles):  dv_j += Σ_i P_ij dout_i,
//                                                 dk_j += scale · Σ_i dS_ij q_i
// with P_ij = exp(scale·q_i·k_j − lse_i) where visible and dS_ij =
// P_ij·(dout_i·v_j − delta_i). Scores are recomputed in both; each output
// element has one owner thread that adds in a fixed order.
#include <cmath>

#include "cuda/attention.cuh"
#include "cuda/check.h"
#include "cuda/launch.cuh"
#include "cuda/ops.h"
#include "cuda/scratch.cuh"

namespace mt::cuda {
namespace {

using namespace detail;

__global__ void delta_kernel(float* delta, const float* dout, const float* out, AttentionDims d) {
  const int64_t w = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (w >= d.batch * d.n_heads * d.q_len) return;
  const int64_t i = w % d.q_len, h = (w / d.q_len) % d.n_heads, b = w / (d.q_len * d.n_heads);
  const int64_t o = out_off(d, b, i, h);
  float s = 0.0f;
  for (int64_t c = lane; c < d.head_dim; c += 32)
    s += dout[o + c] * out[o + c];
  s = warp_sum(s);
  if (lane == 0) delta[w] = s;
}

// Block: kWarps queries of one (b, h); grid (ceil(Tq / kWarps), H, B).
template <int R>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dq_kernel(float* dq, const float* dout, const float* lse, const float* delta, const float* q,
                        const float* k, const float* v, const int32_t* q_pos, const int32_t* k_pos,
                        AttentionDims d, float scale) {
  extern __shared__ float smem[];
  const int D = static_cast<int>(d.head_dim), pitch = D + 1;
  float* Ks = smem;
  float* Vs = Ks + kTile * pitch;
  float* Qs = Vs + kTile * pitch;
  float* Os = Qs + kWarps * D;
  __shared__ int kpos[kTile];
  __shared__ int qmax_s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t b = blockIdx.z, h = blockIdx.y, g = h / (d.n_heads / d.n_kv_heads);
  const int64_t i = int64_t{blockIdx.x} * kWarps + warp;
  const bool active = i < d.q_len;
  const int64_t row = (b * d.n_heads + h) * d.q_len + i;
  const float L = active ? lse[row] : -INFINITY;
  const float Di = active ? delta[row] : 0.0f;
  const int qp = active && L != -INFINITY ? q_pos[b * d.q_len + i] : INT_MIN;
  for (int c = lane; c < D; c += 32) {
    Qs[warp * D + c] = active ? q[q_off(d, b, i, h) + c] : 0.0f;
    Os[warp * D + c] = active ? dout[out_off(d, b, i, h) + c] : 0.0f;
  }
  if (threadIdx.x == 0) qmax_s = INT_MIN;
  __syncthreads();
  if (lane == 0) atomicMax(&qmax_s, qp);
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    acc[r] = 0.0f;
  for (int64_t t0 = 0; t0 < d.kv_len; t0 += kTile) {
    __syncthreads();
    if (threadIdx.x < kTile)
      kpos[threadIdx.x] = t0 + threadIdx.x < d.kv_len ? k_pos[b * d.kv_len + t0 + threadIdx.x] : INT_MAX;
    __syncthreads();
    bool any = false;
    for (int j = 0; j < kTile; ++j)
      any |= kpos[j] <= qmax_s;
    if (!any) continue;
    load_tile(Ks, pitch, k + kv_off(d, b, 0, g), d.kv_stride, t0, d.kv_len, D);
    load_tile(Vs, pitch, v + kv_off(d, b, 0, g), d.kv_stride, t0, d.kv_len, D);
    __syncthreads();
    float ds = 0.0f;
    if (kpos[lane] <= qp) {
      const float p = expf(dot_shared(Qs + warp * D, Ks + lane * pitch, D) * scale - L);
      ds = p * (dot_shared(Os + warp * D, Vs + lane * pitch, D) - Di) * scale;
    }
    for (int j = 0; j < kTile; ++j) {
      const float dsj = __shfl_sync(0xffffffffu, ds, j);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int c = lane + 32 * r;
        if (c < D) acc[r] += dsj * Ks[j * pitch + c];
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int c = lane + 32 * r;
    if (c < D) dq[q_off(d, b, i, h) + c] += acc[r];
  }
}

// Block: kWarps keys of one (b, kv head g); grid (ceil(Tk / kWarps), KV, B).
// Each warp walks the query heads of its group, then the queries in tiles.
template <int R>
__global__ void __launch_bounds__(kWarps * 32)
    attention_dkv_kernel(float* dk, float* dv, const float* dout, const float* lse, const float* delta,
                         const float* q, const float* k, const float* v, const int32_t* q_pos,
                         const int32_t* k_pos, AttentionDims d, float scale) {
  extern __shared__ float smem[];
  const int D = static_cast<int>(d.head_dim), pitch = D + 1;
  float* Qs = smem;
  float* Os = Qs + kTile * pitch;
  float* Ks = Os + kTile * pitch;
  float* Vs = Ks + kWarps * D;
  __shared__ int qpos[kTile];
  __shared__ float lse_s[kTile], delta_s[kTile];
  __shared__ int kmin_s;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t b = blockIdx.z, g = blockIdx.y, group = d.n_heads / d.n_kv_heads;
  const int64_t j = int64_t{blockIdx.x} * kWarps + warp;
  const bool active = j < d.kv_len;
  const int kp = active ? k_pos[b * d.kv_len + j] : INT_MAX;
  for (int c = lane; c < D; c += 32) {
    Ks[warp * D + c] = active ? k[kv_off(d, b, j, g) + c] : 0.0f;
    Vs[warp * D + c] = active ? v[kv_off(d, b, j, g) + c] : 0.0f;
  }
  if (threadIdx.x == 0) kmin_s = INT_MAX;
  __syncthreads();
  if (lane == 0) atomicMin(&kmin_s, kp);
  float ak[R], av[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    ak[r] = av[r] = 0.0f;
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    const int64_t head_row = (b * d.n_heads + h) * d.q_len;
    for (int64_t t0 = 0; t0 < d.q_len; t0 += kTile) {
      __syncthreads();
      if (threadIdx.x < kTile) {
        const int64_t t = t0 + threadIdx.x;
        const bool in = t < d.q_len;
        lse_s[threadIdx.x] = in ? lse[head_row + t] : -INFINITY;
        delta_s[threadIdx.x] = in ? delta[head_row + t] : 0.0f;
        qpos[threadIdx.x] = in && lse_s[threadIdx.x] != -INFINITY ? q_pos[b * d.q_len + t] : INT_MIN;
      }
      __syncthreads();
      bool any = false;
      for (int t = 0; t < kTile; ++t)
        any |= qpos[t] >= kmin_s;
      if (!any) continue;
      load_tile(Qs, pitch, q + q_off(d, b, 0, h), d.q_stride, t0, d.q_len, D);
      load_tile(Os, pitch, dout + out_off(d, b, 0, h), d.out_stride, t0, d.q_len, D);
      __syncthreads();
      float p = 0.0f, ds = 0.0f;
      if (kp <= qpos[lane]) {
        p = expf(dot_shared(Qs + lane * pitch, Ks + warp * D, D) * scale - lse_s[lane]);
        ds = p * (dot_shared(Os + lane * pitch, Vs + warp * D, D) - delta_s[lane]) * scale;
      }
      for (int t = 0; t < kTile; ++t) {
        const float pt = __shfl_sync(0xffffffffu, p, t);
        const float dst = __shfl_sync(0xffffffffu, ds, t);
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int c = lane + 32 * r;
          if (c < D) {
            av[r] += pt * Os[t * pitch + c];
            ak[r] += dst * Qs[t * pitch + c];
          }
        }
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int c = lane + 32 * r;
    if (c < D) {
      dk[kv_off(d, b, j, g) + c] += ak[r];
      dv[kv_off(d, b, j, g) + c] += av[r];
    }
  }
}

template <int R>
void launch_backward(float* dq, float* dk, float* dv, const float* dout, const float* lse, const float* delta,
                     const float* q, const float* k, const float* v, const int32_t* q_pos,
                     const int32_t* k_pos, const AttentionDims& d) {
  const int D = static_cast<int>(d.head_dim);
  const float scale = 1.0f / sqrtf(static_cast<float>(D));
  const size_t smem = sizeof(float) * static_cast<size_t>(2 * kTile * (D + 1) + 2 * kWarps * D);
  MT_CUDA_CHECK(cudaFuncSetAttribute(attention_dq_kernel<R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  MT_CUDA_CHECK(cudaFuncSetAttribute(attention_dkv_kernel<R>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(smem)));
  if (d.q_len > 0) {
    const dim3 grid(static_cast<unsigned>((d.q_len + kWarps - 1) / kWarps), static_cast<unsigned>(d.n_heads),
                    static_cast<unsigned>(d.batch));
    attention_dq_kernel<R>
        <<<grid, kWarps * 32, smem>>>(dq, dout, lse, delta, q, k, v, q_pos, k_pos, d, scale);
    MT_CUDA_CHECK_LAUNCH();
  }
  if (d.kv_len > 0) {
    const dim3 grid(static_cast<unsigned>((d.kv_len + kWarps - 1) / kWarps),
                    static_cast<unsigned>(d.n_kv_heads), static_cast<unsigned>(d.batch));
    attention_dkv_kernel<R>
        <<<grid, kWarps * 32, smem>>>(dk, dv, dout, lse, delta, q, k, v, q_pos, k_pos, d, scale);
    MT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  check_attention_dims(d);
  const int64_t rows = d.batch * d.n_heads * d.q_len;
  if (d.batch == 0) return;
  Scratch<float> delta(rows);
  if (rows > 0) {
    MT_CHECK(rows * 32 / 256 < (1 << 20), "attention_backward: ", rows, " rows exceed one grid");
    delta_kernel<<<blocks_for(rows * 32, 256), 256>>>(delta.get(), dout, out, d);
    MT_CUDA_CHECK_LAUNCH();
  }
  switch ((d.head_dim + 31) / 32) {
    case 1:
      return launch_backward<1>(dq, dk, dv, dout, lse, delta.get(), q, k, v, q_pos, k_pos, d);
    case 2:
      return launch_backward<2>(dq, dk, dv, dout, lse, delta.get(), q, k, v, q_pos, k_pos, d);
    case 3:
      return launch_backward<3>(dq, dk, dv, dout, lse, delta.get(), q, k, v, q_pos, k_pos, d);
    default:
      return launch_backward<4>(dq, dk, dv, dout, lse, delta.get(), q, k, v, q_pos, k_pos, d);
  }
}

}  // namespace mt::cuda

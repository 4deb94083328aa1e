// Element-wise kernels: embedding lookup, RoPE, SwiGLU, AdamW and the bf16
// casts. One thread per element (or per rotated pair), grid-stride loops.
#include <cuda_bf16.h>

#include <cmath>

#include "cuda/check.h"
#include "cuda/launch.cuh"
#include "cuda/ops.h"

namespace mt::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void embedding_forward_kernel(float* out, const int32_t* ids, const float* table, int64_t N,
                                         int64_t C) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N * C;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / C, c = i - n * C;
    out[i] = table[int64_t{ids[n]} * C + c];
  }
}

__global__ void rope_table_kernel(float* cos_t, float* sin_t, int64_t max_pos, int64_t head_dim,
                                  double theta) {
  const int64_t half = head_dim / 2;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < max_pos * half;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t p = i / half, k = i - p * half;
    const double freq = pow(theta, -2.0 * static_cast<double>(k) / static_cast<double>(head_dim));
    const double a = static_cast<double>(p) * freq;
    cos_t[i] = static_cast<float>(cos(a));
    sin_t[i] = static_cast<float>(sin(a));
  }
}

// One thread per (token, head, pair i < D/2): rotates (x[i], x[i + D/2]).
__global__ void rope_kernel(float* x, const int32_t* pos, RopeTableView t, int64_t N, int64_t n_heads,
                            int64_t row_stride, float sign) {
  const int64_t half = t.head_dim / 2;
  const int64_t total = N * n_heads * half;
  for (int64_t e = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; e < total;
       e += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = e % half, nh = e / half;
    const int64_t h = nh % n_heads, n = nh / n_heads;
    float* lo = x + n * row_stride + h * t.head_dim;
    const int64_t row = int64_t{pos[n]} * half + i;
    const float c = t.cos[row], s = sign * t.sin[row];
    const float a = lo[i], b = lo[i + half];
    lo[i] = a * c - b * s;
    lo[i + half] = b * c + a * s;
  }
}

__global__ void swiglu_forward_kernel(float* out, const float* gu, int64_t N, int64_t F) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N * F;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / F, f = i - n * F;
    const float g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
    out[i] = g / (1.0f + expf(-g)) * u;
  }
}

// d/dg silu(g) = σ(g)·(1 + g·(1 − σ(g))).
__global__ void swiglu_backward_kernel(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N * F;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / F, f = i - n * F;
    const float g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f];
    const float sig = 1.0f / (1.0f + expf(-g));
    const float d = dout[i];
    dgu[n * 2 * F + f] = d * u * sig * (1.0f + g * (1.0f - sig));
    dgu[n * 2 * F + F + f] = d * g * sig;
  }
}

struct AdamWScalars {
  float b1, b2, c1, c2, lr, eps, decay;
};

// The update of optim/adamw.cpp, term for term.
__global__ void adamw_kernel(float* params, const float* grads, float* m, float* v, int64_t n,
                             AdamWScalars s) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = grads[i];
    const float mi = s.b1 * m[i] + (1.0f - s.b1) * g;
    const float vi = s.b2 * v[i] + (1.0f - s.b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi * s.c1) / (sqrtf(vi * s.c2) + s.eps);
    params[i] = params[i] - s.decay * params[i] - s.lr * update;
  }
}

__global__ void f32_to_bf16_kernel(__nv_bfloat16* out, const float* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __float2bfloat16_rn(in[i]);
}

__global__ void bf16_to_f32_kernel(float* out, const __nv_bfloat16* in, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    out[i] = __bfloat162float(in[i]);
}

}  // namespace

void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C) {
  if (N * C == 0) return;
  embedding_forward_kernel<<<detail::blocks_for(N * C, kThreads), kThreads>>>(out, ids, table, N, C);
  MT_CUDA_CHECK_LAUNCH();
}

void rope_table_fill(float* cos, float* sin, int64_t max_pos, int64_t head_dim, double theta) {
  MT_REQUIRE(head_dim > 0 && head_dim % 2 == 0, ConfigError, "head_dim (", head_dim,
             ") must be positive and even for rotary embeddings");
  MT_REQUIRE(theta > 0, ConfigError, "rope theta (", theta, ") must be positive");
  const int64_t n = max_pos * (head_dim / 2);
  if (n == 0) return;
  rope_table_kernel<<<detail::blocks_for(n, kThreads), kThreads>>>(cos, sin, max_pos, head_dim, theta);
  MT_CUDA_CHECK_LAUNCH();
}

namespace {
void rope(float* x, const int32_t* pos, const RopeTableView& t, int64_t N, int64_t n_heads,
          int64_t row_stride, float sign) {
  MT_CHECK(n_heads * t.head_dim <= row_stride, "n_heads (", n_heads, ") × head_dim (", t.head_dim,
           ") exceeds row_stride (", row_stride, ")");
  const int64_t total = N * n_heads * (t.head_dim / 2);
  if (total == 0) return;
  rope_kernel<<<detail::blocks_for(total, kThreads), kThreads>>>(x, pos, t, N, n_heads, row_stride, sign);
  MT_CUDA_CHECK_LAUNCH();
}
}  // namespace

void rope_forward(float* x, const int32_t* pos, const RopeTableView& table, int64_t N, int64_t n_heads,
                  int64_t row_stride) {
  rope(x, pos, table, N, n_heads, row_stride, 1.0f);
}

void rope_backward(float* dx, const int32_t* pos, const RopeTableView& table, int64_t N, int64_t n_heads,
                   int64_t row_stride) {
  rope(dx, pos, table, N, n_heads, row_stride, -1.0f);
}

void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F) {
  if (N * F == 0) return;
  swiglu_forward_kernel<<<detail::blocks_for(N * F, kThreads), kThreads>>>(out, gu, N, F);
  MT_CUDA_CHECK_LAUNCH();
}

void swiglu_backward(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F) {
  if (N * F == 0) return;
  swiglu_backward_kernel<<<detail::blocks_for(N * F, kThreads), kThreads>>>(dgu, dout, gu, N, F);
  MT_CUDA_CHECK_LAUNCH();
}

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t t) {
  if (n == 0) return;
  // The step's scalars exactly as optim/adamw.cpp rounds them.
  AdamWScalars s{};
  s.b1 = static_cast<float>(beta1);
  s.b2 = static_cast<float>(beta2);
  s.c1 = static_cast<float>(1.0 / (1.0 - std::pow(beta1, static_cast<double>(t))));
  s.c2 = static_cast<float>(1.0 / (1.0 - std::pow(beta2, static_cast<double>(t))));
  s.lr = static_cast<float>(lr);
  s.eps = static_cast<float>(eps);
  s.decay = static_cast<float>(lr * weight_decay);
  adamw_kernel<<<detail::blocks_for(n, kThreads), kThreads>>>(params, grads, m, v, n, s);
  MT_CUDA_CHECK_LAUNCH();
}

void f32_to_bf16(bf16* out, const float* in, int64_t n) {
  static_assert(sizeof(bf16) == sizeof(__nv_bfloat16));
  if (n == 0) return;
  f32_to_bf16_kernel<<<detail::blocks_for(n, kThreads), kThreads>>>(reinterpret_cast<__nv_bfloat16*>(out), in,
                                                                    n);
  MT_CUDA_CHECK_LAUNCH();
}

void bf16_to_f32(float* out, const bf16* in, int64_t n) {
  if (n == 0) return;
  bf16_to_f32_kernel<<<detail::blocks_for(n, kThreads), kThreads>>>(
      out, reinterpret_cast<const __nv_bfloat16*>(in), n);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda

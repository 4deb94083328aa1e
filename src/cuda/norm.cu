// Row reductions: RMSNorm and cross-entropy, one block per row, block sums in
// a fixed order. RMSNorm's weight gradient sums over rows in two passes
// (per-chunk partials, then the chunks in order) instead of atomics.
#include <cmath>

#include "cuda/check.h"
#include "cuda/launch.cuh"
#include "cuda/ops.h"
#include "cuda/scratch.cuh"

namespace mt::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kRowsPerChunk = 64;  // rows summed per partial of dweight

__global__ void rmsnorm_forward_kernel(float* out, float* rstd, const float* inp, const float* weight,
                                       int64_t C, float eps) {
  __shared__ float scratch[32];
  const float* x = inp + blockIdx.x * C;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    ss += x[c] * x[c];
  ss = detail::block_reduce<false>(ss, scratch);
  const float r = 1.0f / sqrtf(ss / static_cast<float>(C) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  float* y = out + blockIdx.x * C;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    y[c] = x[c] * r * weight[c];
}

// dinp = r·(w∘dy) − x·r³·⟨w∘dy, x⟩ / C
__global__ void rmsnorm_dinp_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                    const float* rstd, int64_t C) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* x = inp + row * C;
  const float* dy = dout + row * C;
  float dot = 0.0f;
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dot += weight[c] * dy[c] * x[c];
  dot = detail::block_reduce<false>(dot, scratch);
  const float r = rstd[row];
  const float k = r * r * r * dot / static_cast<float>(C);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x)
    dinp[row * C + c] = r * weight[c] * dy[c] - k * x[c];
}

// partial[chunk, c] = Σ over the chunk's rows of dy·x·r, rows in order.
__global__ void rmsnorm_dweight_partial_kernel(float* partial, const float* dout, const float* inp,
                                               const float* rstd, int64_t N, int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  const int64_t r0 = int64_t{blockIdx.y} * kRowsPerChunk;
  const int64_t r1 = r0 + kRowsPerChunk < N ? r0 + kRowsPerChunk : N;
  float s = 0.0f;
  for (int64_t r = r0; r < r1; ++r)
    s += dout[r * C + c] * inp[r * C + c] * rstd[r];
  partial[int64_t{blockIdx.y} * C + c] = s;
}

__global__ void sum_chunks_kernel(float* dweight, const float* partial, int64_t chunks, int64_t C) {
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  float s = 0.0f;
  for (int64_t k = 0; k < chunks; ++k)
    s += partial[k * C + c];
  dweight[c] += s;
}

__global__ void cross_entropy_forward_kernel(float* losses, float* lse, const float* logits,
                                             const int32_t* targets, int64_t V, int32_t ignore_index) {
  __shared__ float scratch[32];
  const float* x = logits + blockIdx.x * V;
  float m = -INFINITY;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    m = fmaxf(m, x[v]);
  m = detail::block_reduce<true>(m, scratch);
  float s = 0.0f;
  for (int64_t v = threadIdx.x; v < V; v += blockDim.x)
    s += expf(x[v] - m);
  s = detail::block_reduce<false>(s, scratch);
  if (threadIdx.x == 0) {
    const float l = m + logf(s);
    const int32_t t = targets[blockIdx.x];
    lse[blockIdx.x] = l;
    losses[blockIdx.x] = t == ignore_index ? 0.0f : l - x[t];
  }
}

__global__ void cross_entropy_backward_kernel(float* dlogits, const float* logits, const float* lse,
                                              const int32_t* targets, float dloss, int64_t N, int64_t V,
                                              int32_t ignore_index) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < N * V;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t n = i / V, v = i - n * V;
    const int32_t t = targets[n];
    const float p = expf(logits[i] - lse[n]);
    dlogits[i] = t == ignore_index ? 0.0f : dloss * (p - (v == t ? 1.0f : 0.0f));
  }
}

}  // namespace

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                     float eps) {
  if (N == 0) return;
  MT_CHECK(N < (1LL << 31), "rmsnorm: ", N, " rows");
  rmsnorm_forward_kernel<<<static_cast<unsigned>(N), kRowThreads>>>(out, rstd, inp, weight, C, eps);
  MT_CUDA_CHECK_LAUNCH();
}

void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C) {
  if (N == 0 || C == 0) return;
  rmsnorm_dinp_kernel<<<static_cast<unsigned>(N), kRowThreads>>>(dinp, dout, inp, weight, rstd, C);
  MT_CUDA_CHECK_LAUNCH();
  const int64_t chunks = (N + kRowsPerChunk - 1) / kRowsPerChunk;
  MT_CHECK(chunks <= 65535, "rmsnorm_backward: ", N, " rows exceed ", 65535 * kRowsPerChunk);
  detail::Scratch<float> partial(chunks * C);
  const unsigned cols = static_cast<unsigned>((C + kRowThreads - 1) / kRowThreads);
  rmsnorm_dweight_partial_kernel<<<dim3(cols, static_cast<unsigned>(chunks)), kRowThreads>>>(
      partial.get(), dout, inp, rstd, N, C);
  MT_CUDA_CHECK_LAUNCH();
  sum_chunks_kernel<<<cols, kRowThreads>>>(dweight, partial.get(), chunks, C);
  MT_CUDA_CHECK_LAUNCH();
}

void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t N,
                           int64_t V, int32_t ignore_index) {
  if (N == 0) return;
  cross_entropy_forward_kernel<<<static_cast<unsigned>(N), 512>>>(losses, lse, logits, targets, V,
                                                                  ignore_index);
  MT_CUDA_CHECK_LAUNCH();
}

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            float dloss, int64_t N, int64_t V, int32_t ignore_index) {
  if (N * V == 0) return;
  cross_entropy_backward_kernel<<<detail::blocks_for(N * V, 256), 256>>>(dlogits, logits, lse, targets, dloss,
                                                                         N, V, ignore_index);
  MT_CUDA_CHECK_LAUNCH();
}

}  // namespace mt::cuda

#include "ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"
#include "ops/cpu_kernels.h"
#include "ops/vec_math.h"

namespace mt {

namespace {

constexpr int64_t kSumBlock = 256;

void check_targets(const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index) {
  for (int64_t n = 0; n < N; ++n) {
    const int32_t t = targets[n];
    MT_CHECK(t == ignore_index || (t >= 0 && t < V), "target ", t, " of token ", n, " is outside [0, ", V,
             ") and is not the ignore index ", ignore_index);
  }
}

}  // namespace

void cpu::cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets,
                                int64_t N, int64_t V, int32_t ignore_index) {
  check_targets(targets, N, V, ignore_index);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t v = 0; v < V; ++v)
      m = x[v] > m ? x[v] : m;
    // Σ exp(x − m) in fp32 over blocks of kSumBlock, the block sums in double:
    // accurate for any V, and the fp32 inner loop vectorises.
    double s = 0.0;
    for (int64_t v0 = 0; v0 < V; v0 += kSumBlock) {
      const int64_t v1 = std::min(V, v0 + kSumBlock);
      float block = 0.0f;
#pragma omp simd reduction(+ : block)
      for (int64_t v = v0; v < v1; ++v)
        block += exp_vec(x[v] - m);
      s += static_cast<double>(block);
    }
    const double l = static_cast<double>(m) + std::log(s);
    lse[n] = static_cast<float>(l);
    const int32_t t = targets[n];
    losses[n] = t == ignore_index ? 0.0f : static_cast<float>(l - static_cast<double>(x[t]));
  }
}

void cpu::cross_entropy_backward(float* dlogits, const float* logits, const float* lse,
                                 const int32_t* targets, float dloss, int64_t N, int64_t V,
                                 int32_t ignore_index) {
  check_targets(targets, N, V, ignore_index);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits + n * V;
    float* d = dlogits + n * V;  // may alias x: each element is read before it is written
    const int32_t t = targets[n];
    if (t == ignore_index) {
      for (int64_t v = 0; v < V; ++v)
        d[v] = 0.0f;
      continue;
    }
    const float l = lse[n];
    const float p_t = exp_vec(x[t] - l);
#pragma omp simd
    for (int64_t v = 0; v < V; ++v)
      d[v] = dloss * exp_vec(x[v] - l);
    d[t] = dloss * (p_t - 1.0f);
  }
}

}  // namespace mt

#include "ops/cross_entropy.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "core/error.h"

namespace mt {

namespace {

// exp(x) in fp32 that the compiler can vectorise (std::exp is a scalar libm
// call, and cross-entropy and SwiGLU would spend most of their time in it).
// x = n·ln2 + r with |r| ≤ ln2/2; e^r by the Cephes minimax polynomial
// (≈ 1 ulp); 2^n assembled in the exponent bits. Below −87.3 the result is 0,
// above 88.3 it saturates at e^88.3 (no inf); NaN propagates.
inline float exp_vec(float x) {
  const float xc = x > 88.3f ? 88.3f : (x < -87.3f ? -87.3f : x);
  // Adding 1.5·2^23 rounds xc·log2(e) to the nearest integer n and leaves n in
  // the low mantissa bits of t (no float→int conversion, which GCC will not
  // vectorise under the default -ftrapping-math).
  const float t = xc * 1.44269504088896341f + 12582912.0f;
  const float n = t - 12582912.0f;
  const float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;  // ln2 split: n · 0.693359375 is exact
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float er = p * r * r + r + 1.0f;
  const float scale = std::bit_cast<float>((std::bit_cast<int32_t>(t) - 0x4B400000 + 127) << 23);
  return x < -87.3f ? 0.0f : er * scale;
}

constexpr int64_t kSumBlock = 256;

void check_targets(const int32_t* targets, int64_t N, int64_t V, int32_t ignore_index) {
  for (int64_t n = 0; n < N; ++n) {
    const int32_t t = targets[n];
    MT_CHECK(t == ignore_index || (t >= 0 && t < V), "target ", t, " of token ", n, " is outside [0, ", V,
             ") and is not the ignore index ", ignore_index);
  }
}

}  // namespace

void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t N,
                           int64_t V, int32_t ignore_index) {
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

void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            float dloss, int64_t N, int64_t V, int32_t ignore_index) {
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

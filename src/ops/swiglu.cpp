#include "ops/swiglu.h"

#include <bit>
#include <cmath>
#include <cstdint>

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

}  // namespace

void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* g = gu + n * 2 * F;
    const float* u = g + F;
    float* h = out + n * F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      const float sig = 1.0f / (1.0f + exp_vec(-g[f]));
      h[f] = (g[f] * sig) * u[f];
    }
  }
}

void swiglu_backward(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F) {
  // d silu(g) / dg = σ(g) · (1 + g · (1 − σ(g)))
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* g = gu + n * 2 * F;
    const float* u = g + F;
    const float* dh = dout + n * F;
    float* dg = dgu + n * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      const float sig = 1.0f / (1.0f + exp_vec(-g[f]));
      du[f] = dh[f] * (g[f] * sig);
      dg[f] = dh[f] * u[f] * (sig * (1.0f + g[f] * (1.0f - sig)));
    }
  }
}

}  // namespace mt

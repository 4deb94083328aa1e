// Vectorisable fp32 math for the kernels of the ops folder (internal header).
// std::exp is a scalar libm call; cross-entropy, SwiGLU and attention would
// spend most of their time in it. These functions have no calls and no
// branches the compiler cannot turn into selects, so loops over them
// vectorise.
#pragma once

#include <bit>
#include <cstdint>

#include "core/bf16.h"

namespace mt {

// exp(x) in fp32.
//   Accuracy: relative error < 1e-7 (≈ 1 ulp, measured ≤ 1.4 ulp) where the
//     result is a normal float, x in [−87.3, 88.3].
//   Below −87.3 (so also exp(−inf)): exactly 0.
//   Above 88.3 (so also exp(+inf)): saturates at e^88.3 ≈ 2.2e38, never inf,
//     so sums of exps and products with them do not overflow.
//   NaN stays NaN.
// Method: x = n·ln2 + r with |r| ≤ ln2/2; e^r by the Cephes minimax
// polynomial; 2^n assembled in the exponent bits.
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

// y[i] = float_to_bf16(x[i]).bits for i < n: a row of a bf16 operand.
inline void to_bf16_bits(const float* x, int64_t n, uint16_t* y) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i)
    y[i] = float_to_bf16(x[i]).bits;
}

}  // namespace mt

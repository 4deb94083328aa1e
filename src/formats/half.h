// 16-bit floating-point formats found in Hugging Face checkpoints, widened to
// fp32 exactly (every bf16 and f16 value is representable in fp32).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace mt {

// bfloat16 is the upper half of an IEEE fp32: 1 sign, 8 exponent, 7 mantissa bits.
inline float bf16_to_f32(uint16_t h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h) << 16);
}

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits.
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: mant * 2^-24, exact in fp32
    const float mag = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -mag : mag;
  }
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));  // inf, NaN (payload kept)
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

}  // namespace mt

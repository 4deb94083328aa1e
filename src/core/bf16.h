// bfloat16 on the host: the top 16 bits of an IEEE fp32 (1 sign, 8 exponent,
// 7 mantissa bits). Conversion from fp32 rounds to nearest, ties to even, as
// the GPU's __float2bfloat16_rn and PyTorch's .to(torch.bfloat16) do, so a CPU
// run can emulate bf16 rounding bit for bit. NaN stays NaN (quietened, sign
// kept); ±Inf and ±0 are exact; values that round past the largest bf16
// become ±Inf; fp32 subnormals round like any other value (bf16 has the same
// exponent range, so they stay subnormal or round to ±0 or the smallest normal).
#pragma once

#include <bit>
#include <cstdint>

namespace mt {

struct bf16 {
  uint16_t bits = 0;
};

constexpr float bf16_to_float(bf16 h) {
  return std::bit_cast<float>(static_cast<uint32_t>(h.bits) << 16);
}

constexpr bf16 float_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  // NaN: keep sign and top payload, force the quiet bit.
  const auto quiet_nan = static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Adding 0x7fff plus the lowest kept bit rounds the dropped half to nearest
  // and a tie towards the even kept value; a carry ripples into the exponent,
  // which is exactly the next representable value (or Inf past the largest).
  const auto rounded = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  // A select rather than a branch, so that loops of conversions vectorise.
  return bf16{(u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded};
}

// fp32 → bf16 → fp32: the value a bf16 store keeps.
constexpr float round_to_bf16(float f) {
  return bf16_to_float(float_to_bf16(f));
}

}  // namespace mt

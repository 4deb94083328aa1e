// bf16 conversion against an independent formulation: the two bf16 neighbours
// of x are found by truncation, and the nearer one is picked by comparing
// distances in double (ties to the even mantissa), over every fp32 bit pattern.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "core/bf16.h"

namespace mt {
namespace {

// Value of the bf16 pattern `bits` as a double; the pattern just past the
// largest finite magnitude (0x7f80, Inf) counts as 2^128 so that the nearest
// rule also decides overflow (IEEE: round to Inf at or past max + half an ulp).
double bf16_value_for_rounding(uint32_t bits16) {
  const uint32_t mag = bits16 & 0x7fffu;
  const double sign = (bits16 & 0x8000u) ? -1.0 : 1.0;
  if (mag == 0x7f80u) return sign * std::ldexp(1.0, 128);
  return static_cast<double>(std::bit_cast<float>(bits16 << 16));
}

uint16_t reference_round(uint32_t u) {
  const float f = std::bit_cast<float>(u);
  if (std::isnan(f)) return 0;  // checked separately
  if (std::isinf(f)) return static_cast<uint16_t>(u >> 16);
  const uint32_t toward_zero = u >> 16;    // same sign, magnitude truncated
  const uint32_t away = toward_zero + 1u;  // next magnitude up (may be the Inf pattern)
  const double x = static_cast<double>(f);
  const double d_lo = std::abs(x - bf16_value_for_rounding(toward_zero));
  const double d_hi = std::abs(bf16_value_for_rounding(away) - x);
  if (d_lo < d_hi) return static_cast<uint16_t>(toward_zero);
  if (d_hi < d_lo) return static_cast<uint16_t>(away);
  return static_cast<uint16_t>((toward_zero & 1u) == 0 ? toward_zero : away);
}

// Every kept half (all 65536 sign/exponent/mantissa tops, so every exponent,
// subnormals, Inf and NaN) with the dropped halves that decide the rounding:
// zero, just above zero, just below / at / just above the tie, the maximum,
// and 58 random ones. (All 2^32 patterns take ~40 s on the CI machines; these
// cover each branch of the rule at every exponent.)
TEST(Bf16, EveryKeptHalfWithDecidingLowHalvesRoundsToNearestEven) {
  std::vector<uint32_t> lows = {0x0000u, 0x0001u, 0x7ffeu, 0x7fffu, 0x8000u, 0x8001u, 0xfffeu, 0xffffu};
  std::mt19937 gen(7);
  for (int i = 0; i < 58; ++i)
    lows.push_back(gen() & 0xffffu);
  int64_t mismatches = 0;
  uint32_t first_bad = 0;
  for (uint32_t hi = 0; hi <= 0xffffu; ++hi) {
    for (uint32_t lo : lows) {
      const uint32_t u = (hi << 16) | lo;
      const float f = std::bit_cast<float>(u);
      const uint16_t got = float_to_bf16(f).bits;
      bool ok;
      if (std::isnan(f)) {
        const float back = bf16_to_float(bf16{got});
        ok = std::isnan(back) && std::signbit(back) == std::signbit(f) && (got & 0x0040u) != 0;
      } else {
        ok = got == reference_round(u);
      }
      if (!ok && mismatches++ == 0) first_bad = u;
    }
  }
  EXPECT_EQ(mismatches, 0) << "e.g. fp32 bits 0x" << std::hex << first_bad;
}

TEST(Bf16, EveryBf16PatternSurvivesTheRoundTrip) {
  for (uint32_t b = 0; b <= 0xffffu; ++b) {
    const float f = bf16_to_float(bf16{static_cast<uint16_t>(b)});
    const uint16_t back = float_to_bf16(f).bits;
    if (std::isnan(f)) {
      EXPECT_EQ(back, b | 0x0040u) << "NaN pattern " << b;  // quietened, payload kept
    } else {
      EXPECT_EQ(back, b) << "pattern " << b;
    }
  }
}

TEST(Bf16, HandPickedEdges) {
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: tie to even keeps 1.
  EXPECT_EQ(round_to_bf16(1.0f + 0x1p-8f), 1.0f);
  // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): goes up.
  EXPECT_EQ(round_to_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  // Just past the tie rounds up.
  EXPECT_EQ(round_to_bf16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 1.0f + 0x1p-7f);
  // The largest finite fp32 is past max bf16 + half an ulp: Inf.
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::max()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(round_to_bf16(-std::numeric_limits<float>::infinity()), -std::numeric_limits<float>::infinity());
  // Signed zero and the smallest fp32 subnormal (rounds to +0), and a bf16 subnormal (exact).
  EXPECT_TRUE(std::signbit(round_to_bf16(-0.0f)));
  EXPECT_EQ(round_to_bf16(std::numeric_limits<float>::denorm_min()), 0.0f);
  EXPECT_EQ(round_to_bf16(0x1p-133f), 0x1p-133f);
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(bf16_to_float(bf16{0x3f80}), 1.0f);
  EXPECT_EQ(bf16_to_float(bf16{0xc000}), -2.0f);
}

}  // namespace
}  // namespace mt

// RoPE scaling against formulas written here, independently of
// src/ops/rope_scaling.cpp, in double: each type's inverse frequencies and
// attention factor (Hugging Face's rope_scaling semantics, docs/MODEL.md),
// and the table's cos/sin.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "bounds.h"
#include "core/error.h"
#include "ops/rope.h"
#include "ops/rope_scaling.h"

namespace mt {
namespace {

constexpr double kPi = 3.14159265358979323846;

// Unscaled: 1 / θ^(2i/D) for i = 0 .. D/2−1.
std::vector<double> ref_default(int D, double theta) {
  std::vector<double> f;
  for (int j = 0; j < D; j += 2)
    f.push_back(1.0 / std::pow(theta, static_cast<double>(j) / D));
  return f;
}

std::vector<double> ref_dynamic(int D, double theta, double factor, double L, double L0) {
  if (L <= L0) return ref_default(D, theta);
  const double base = theta * std::pow(factor * L / L0 - factor + 1.0, D / (D - 2.0));
  return ref_default(D, base);
}

std::vector<double> ref_yarn(int D, double theta, double factor, double L0, double fast, double slow) {
  // The pair index at which a frequency makes `r` full turns over L0 positions.
  auto dim_for = [&](double r) { return D * std::log(L0 / (2 * kPi * r)) / (2 * std::log(theta)); };
  double lo = std::floor(dim_for(fast)), hi = std::ceil(dim_for(slow));
  lo = lo < 0 ? 0 : lo;
  hi = hi > D - 1 ? D - 1 : hi;
  if (hi == lo) hi += 0.001;
  std::vector<double> f = ref_default(D, theta);
  for (size_t i = 0; i < f.size(); ++i) {
    double t = (static_cast<double>(i) - lo) / (hi - lo);
    t = t < 0 ? 0 : (t > 1 ? 1 : t);  // 0: keep (extrapolate), 1: divide by factor (interpolate)
    f[i] = (1 - t) * f[i] + t * f[i] / factor;
  }
  return f;
}

std::vector<double> ref_llama3(int D, double theta, double factor, double lo_f, double hi_f, double L0) {
  std::vector<double> f = ref_default(D, theta);
  for (double& x : f) {
    const double period = 2 * kPi / x;  // positions per full turn
    if (period < L0 / hi_f) continue;   // fast: unchanged
    if (period > L0 / lo_f) {           // slow: interpolated
      x = x / factor;
      continue;
    }
    const double w = (L0 / period - lo_f) / (hi_f - lo_f);
    x = w * x + (1 - w) * (x / factor);
  }
  return f;
}

// Double against double, the same formulas written twice (no sums, so no
// order a host could change): each evaluation is a few correctly rounded
// operations and a pow, whose error is ≈ |ln θ| · u64 (θ ≤ 5e5: 13 u64); a
// few ulps each, 1e-13 ≈ 450 u64 covers both with a margin, and a wrong ramp
// or factor is off by 1e-2 or more.
void expect_near_rel(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], want[i], 1e-13 * std::abs(want[i])) << "pair " << i;
}

// The seed's example: a model trained at 128K served at 1M.
constexpr double kFactor = 1'000'000.0 / 128'000.0;

TEST(RopeScaling, SeedFactorIs7_8125) {
  EXPECT_EQ(kFactor, 7.8125);
}

TEST(RopeScaling, LinearDividesEveryFrequency) {
  const RopeScaling s = parse_rope_scaling("linear,factor=7.8125");
  std::vector<double> want = ref_default(128, 500000.0);
  for (double& x : want)
    x /= kFactor;
  expect_near_rel(rope_inv_freq(s, 128, 500000.0, 1'000'000, 1'000'000), want);
  EXPECT_EQ(rope_attention_factor(s), 1.0);
}

TEST(RopeScaling, DynamicChangesTheBaseOnlyPastL0) {
  const RopeScaling s = parse_rope_scaling("dynamic,factor=7.8125,original_max_position_embeddings=128000");
  for (int64_t L : {int64_t{1000}, int64_t{128000}, int64_t{128001}, int64_t{500000}, int64_t{1000000}}) {
    expect_near_rel(rope_inv_freq(s, 128, 500000.0, 1'000'000, L),
                    ref_dynamic(128, 500000.0, kFactor, static_cast<double>(L), 128000.0));
  }
  // Without original_max_position_embeddings the threshold is max_seq_len.
  const RopeScaling t = parse_rope_scaling("dynamic,factor=2");
  expect_near_rel(rope_inv_freq(t, 16, 10000.0, 64, 100), ref_dynamic(16, 10000.0, 2.0, 100.0, 64.0));
  EXPECT_EQ(rope_attention_factor(s), 1.0);
}

TEST(RopeScaling, YarnRampsAndScalesCosAndSin) {
  const RopeScaling s = parse_rope_scaling("yarn,factor=7.8125,original_max_position_embeddings=128000");
  const std::vector<double> got = rope_inv_freq(s, 128, 500000.0, 1'000'000, 1'000'000);
  expect_near_rel(got, ref_yarn(128, 500000.0, kFactor, 128000.0, 32, 1));
  // The ramp is real here: the fastest pair is kept, the slowest interpolated.
  const std::vector<double> plain = ref_default(128, 500000.0);
  EXPECT_EQ(got.front(), plain.front());
  EXPECT_NEAR(got.back(), plain.back() / kFactor, 1e-13 * plain.back());
  EXPECT_NEAR(rope_attention_factor(s), 0.1 * std::log(7.8125) + 1.0,
              1e-15);                                      // the same double formula: ≤ 4 u64
  EXPECT_NEAR(rope_attention_factor(s), 1.2055725, 1e-7);  // the literal's 8 digits: within 5e-8
  // Given fields win over the defaults.
  const RopeScaling t = parse_rope_scaling("yarn,factor=4,beta_fast=16,beta_slow=2,attention_factor=1.5");
  expect_near_rel(rope_inv_freq(t, 64, 10000.0, 4096, 4096), ref_yarn(64, 10000.0, 4, 4096.0, 16, 2));
  EXPECT_EQ(rope_attention_factor(t), 1.5);
  // The table multiplies both cos and sin by the factor.
  const RopeTable table(300, got, rope_attention_factor(s));
  for (int64_t p : {int64_t{0}, int64_t{1}, int64_t{299}}) {
    for (int64_t i : {int64_t{0}, int64_t{20}, int64_t{63}}) {
      const double a = static_cast<double>(p) * got[static_cast<size_t>(i)];
      // One rounding of the double value (u·|value|), the literal factor's 8
      // digits (5e-8·|cos|), the angle's double error (16 u64·|a|).
      const double c = std::cos(a) * 1.2055725, sn = std::sin(a) * 1.2055725;
      const double e = 16 * testing::kU64 * std::abs(a);
      EXPECT_TRUE(testing::within_bound(table.cos_row(p)[i], c,
                                        testing::kU32 * std::abs(c) + 5e-8 * std::abs(std::cos(a)) + e,
                                        "yarn cos"));
      EXPECT_TRUE(testing::within_bound(table.sin_row(p)[i], sn,
                                        testing::kU32 * std::abs(sn) + 5e-8 * std::abs(std::sin(a)) + e,
                                        "yarn sin"));
    }
  }
}

TEST(RopeScaling, Llama3BlendsBetweenWavelengths) {
  const RopeScaling s = parse_rope_scaling(
      "llama3,factor=7.8125,low_freq_factor=1,high_freq_factor=4,original_max_position_embeddings=128000");
  expect_near_rel(rope_inv_freq(s, 128, 500000.0, 1'000'000, 1'000'000),
                  ref_llama3(128, 500000.0, kFactor, 1, 4, 128000.0));
  // Llama 3.1's published setting.
  const RopeScaling t = parse_rope_scaling(
      "llama3,factor=8,low_freq_factor=1,high_freq_factor=4,original_max_position_embeddings=8192");
  expect_near_rel(rope_inv_freq(t, 128, 500000.0, 131072, 131072),
                  ref_llama3(128, 500000.0, 8, 1, 4, 8192.0));
  EXPECT_EQ(rope_attention_factor(t), 1.0);
}

TEST(RopeScaling, NoneIsTheUnscaledTableBitForBit) {
  const RopeTable a(64, 16, 10000.0);
  const RopeTable b(64, rope_inv_freq(RopeScaling{}, 16, 10000.0, 64, 64), 1.0);
  for (int64_t p = 0; p < 64; ++p)
    for (int64_t i = 0; i < 8; ++i) {
      EXPECT_EQ(a.cos_row(p)[i], b.cos_row(p)[i]);
      EXPECT_EQ(a.sin_row(p)[i], b.sin_row(p)[i]);
    }
}

TEST(RopeScaling, SpecRoundTripsAndBadInputNamesTheProblem) {
  for (const char* spec : {"none", "linear,factor=4", "dynamic,factor=2,original_max_position_embeddings=128",
                           "yarn,factor=7.8125,beta_fast=32,beta_slow=1"}) {
    EXPECT_EQ(format_rope_scaling(parse_rope_scaling(spec)), spec);
  }
  auto error_of = [](const char* spec) {
    try {
      parse_rope_scaling(spec);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("ntk,factor=2").find("unknown RoPE scaling type 'ntk'"), std::string::npos);
  EXPECT_NE(error_of("linear").find("'linear' needs the field 'factor'"), std::string::npos);
  EXPECT_NE(error_of("linear,factor=0.5").find("factor ≥ 1"), std::string::npos);
  EXPECT_NE(error_of("linear,beta_fast=3,factor=2").find("has no field 'beta_fast'"), std::string::npos);
  EXPECT_NE(error_of("yarn,factor=x").find("is not a number"), std::string::npos);
  EXPECT_NE(error_of("llama3,factor=8,low_freq_factor=1,high_freq_factor=4")
                .find("needs the field 'original_max_position_embeddings'"),
            std::string::npos);
  EXPECT_NE(
      error_of("llama3,factor=8,low_freq_factor=4,high_freq_factor=1,original_max_position_embeddings=9")
          .find("must be below high_freq_factor"),
      std::string::npos);
}

}  // namespace
}  // namespace mt

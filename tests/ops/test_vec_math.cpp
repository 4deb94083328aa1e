// exp_vec against std::exp in double: accuracy where the result is a normal
// float, and the documented edges (0 far below, saturation far above, NaN).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/vec_math.h"

namespace mt {
namespace {

TEST(VecMath, ExpMatchesStdExpWithinTwoUlp) {
  // 2^-22 = 2 ulp of fp32 relative to the result; the polynomial stays under 1.4 ulp.
  const double bound = std::ldexp(1.0, -22);
  double worst = 0.0;
  float worst_x = 0.0f;
  const int steps = 200000;
  for (int i = 0; i <= steps; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / steps;  // [−87, 88]
    const double ref = std::exp(static_cast<double>(x));
    const double err = std::abs(static_cast<double>(exp_vec(x)) - ref) / ref;
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  }
  EXPECT_LE(worst, bound) << "at x = " << worst_x;
}

TEST(VecMath, ExpIsExactAtZeroAndSmallIntegersAreClose) {
  EXPECT_EQ(exp_vec(0.0f), 1.0f);
  // exp_vec's documented accuracy, the 2 ulp (2⁻²² relative) the sweep above checks.
  EXPECT_NEAR(exp_vec(1.0f), 2.718281828459045, 0x1p-22 * 2.718281828459045);
  EXPECT_NEAR(exp_vec(-1.0f), 0.36787944117144233, 0x1p-22 * 0.36787944117144233);
}

TEST(VecMath, ExpIsExactlyZeroFarBelow) {
  EXPECT_EQ(exp_vec(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(exp_vec(-87.5f), 0.0f);
  EXPECT_EQ(exp_vec(-100.0f), 0.0f);
  EXPECT_EQ(exp_vec(-std::numeric_limits<float>::max()), 0.0f);
}

TEST(VecMath, ExpSaturatesInsteadOfOverflowing) {
  const float cap = exp_vec(88.3f);
  EXPECT_TRUE(std::isfinite(cap));
  EXPECT_NEAR(cap / std::exp(static_cast<double>(88.3f)), 1.0, 0x1p-22);  // e^88.3 ≈ 2.2e38, within 2 ulp
  EXPECT_EQ(exp_vec(89.0f), cap);
  EXPECT_EQ(exp_vec(1000.0f), cap);
  EXPECT_EQ(exp_vec(std::numeric_limits<float>::infinity()), cap);
}

TEST(VecMath, ExpKeepsNaN) {
  EXPECT_TRUE(std::isnan(exp_vec(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp_vec(-std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace mt

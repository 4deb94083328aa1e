// SwiGLU activation on the stacked [gate | up] GEMM output.
#include <gtest/gtest.h>

#include <cmath>

#include "bounds.h"
#include "ops/reference.h"
#include "ops/swiglu.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::project;
using testing::random_floats;
using testing::rel_error;
using testing::to_double;
using testing::within_bound;

// Bounds of the fp32 kernel, element by element (no sums, so no order): σ =
// 1/(1 + exp_vec(−g)) is off by δσ = kExpRel + γ_2 relatively (exp_vec's 2 ulp,
// test_vec_math.cpp; the sum; the division), h = (g·σ)·u and du = dh·(g·σ) by
// δσ + γ_2. dg = (dh·u)·(σ·A) with A = 1 + g·(1 − σ): 1 − σ is off by σ·δσ +
// u·|1 − σ| absolutely, A by |g| times that plus u·|g·(1 − σ)| + u·|A|, and
// dg by |dh·u|·(σ·δA + |σ·A|·(δσ + 3u)). (1 + 1e-6) covers second-order terms.
constexpr double kExpRel = 0x1p-22;
constexpr double kSigmaRel = kExpRel + testing::gamma_n(2);

std::vector<double> forward_bound(const std::vector<double>& expect) {
  std::vector<double> b(expect.size());
  for (size_t i = 0; i < b.size(); ++i)
    b[i] = (kSigmaRel + testing::gamma_n(2)) * std::abs(expect[i]) * (1 + 1e-6) + 1e-300;
  return b;
}

std::vector<double> backward_bound(const std::vector<double>& gu, const std::vector<double>& dh, int64_t N,
                                   int64_t F) {
  const double u32 = testing::kU32;
  std::vector<double> b(N * 2 * F);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t f = 0; f < F; ++f) {
      const double g = gu[n * 2 * F + f], u = gu[n * 2 * F + F + f], d = dh[n * F + f];
      const double sig = 1.0 / (1.0 + std::exp(-g)), A = 1.0 + g * (1.0 - sig);
      const double dA = std::abs(g) * (sig * kSigmaRel + u32 * (1.0 - sig)) * (1 + u32) +
                        u32 * std::abs(g * (1.0 - sig)) + u32 * std::abs(A);
      b[n * 2 * F + f] =
          std::abs(d * u) * (sig * dA + std::abs(sig * A) * (kSigmaRel + 3 * u32)) * (1 + 1e-6);
      b[n * 2 * F + F + f] = (kSigmaRel + testing::gamma_n(2)) * std::abs(d * g * sig) * (1 + 1e-6) + 1e-300;
    }
  }
  return b;
}

TEST(SwiGlu, HandComputedValues) {
  // One row, F = 4: gate in columns 0..3, up in 4..7. silu(1) = 1/(1 + e^−1) = 0.7310585786300049,
  // silu(−1) = −0.2689414213699951, silu(20) = 20 / (1 + e^−20) ≈ 20.
  const std::vector<float> gu = {0, 1, -1, 20, 5, 2, 3, 1};
  std::vector<float> out(4);
  swiglu_forward(out.data(), gu.data(), 1, 4);
  EXPECT_EQ(out[0], 0.0f);
  const auto b = forward_bound({0.0, 1.4621171572600098, -0.8068242641099853, 20.0});
  EXPECT_TRUE(within_bound(out[1], 1.4621171572600098, b[1], "silu(1)·2"));
  EXPECT_TRUE(within_bound(out[2], -0.8068242641099853, b[2], "silu(-1)·3"));
  EXPECT_TRUE(within_bound(out[3], 20.0 / (1.0 + std::exp(-20.0)), b[3], "silu(20)·1"));
  // d/dg silu(g) at 0 is 1/2; d/du is silu(g) = 0.
  const std::vector<float> dout = {1, 0, 0, 0};
  std::vector<float> dgu(8);
  swiglu_backward(dgu.data(), dout.data(), gu.data(), 1, 4);
  EXPECT_EQ(dgu[0], 2.5f);  // u · σ(0) = 5 · 1/2
  EXPECT_EQ(dgu[4], 0.0f);
}

TEST(SwiGlu, ExtremeGatesStayFinite) {
  const std::vector<float> gu = {-1000, -100, 100, 1000, 2, 3, 4, 5};
  std::vector<float> out(4), dgu(8);
  const std::vector<float> dout = {1, 1, 1, 1};
  swiglu_forward(out.data(), gu.data(), 1, 4);
  swiglu_backward(dgu.data(), dout.data(), gu.data(), 1, 4);
  for (float v : out)
    EXPECT_TRUE(std::isfinite(v));
  for (float v : dgu)
    EXPECT_TRUE(std::isfinite(v));
  // g = −1000: exp_vec(1000) saturates at e^88.3 within its 2 ulp
  // (test_vec_math.cpp), so σ = 1/(1 + cap) is e^−88.3 ≈ 4.5e-39 within
  // kSigmaRel relatively and 2^−150 absolutely (a subnormal), h = g·σ·u and
  // dg = dh·u·σ·(1 + g) follow within γ_3 more.
  const double sat = std::exp(-static_cast<double>(88.3f));
  const double d_sig = sat * kSigmaRel + 0x1p-150;
  EXPECT_TRUE(
      within_bound(out[0], -1000.0 * 2 * sat, 2000.0 * (d_sig + sat * testing::gamma_n(3)), "h at -1000"));
  EXPECT_TRUE(
      within_bound(dgu[0], 2 * -999.0 * sat, 2 * 999.0 * (d_sig + sat * testing::gamma_n(3)), "dg at -1000"));
  // g = 1000: exp_vec(−1000) is exactly 0 (test_vec_math.cpp), so σ = 1 and
  // h = 1000 · 5, dg = 1 · 5 · (1 · (1 + 1000 · 0)): exact.
  EXPECT_EQ(out[3], 5000.0f);
  EXPECT_EQ(dgu[3], 5.0f);  // silu'(g) → 1 for large g
}

struct Shape {
  int64_t N, F;
};

class SwiGluTest : public ::testing::TestWithParam<Shape> {};

TEST_P(SwiGluTest, ForwardMatchesReference) {
  const auto [N, F] = GetParam();
  const auto gu = random_floats(N * 2 * F, 1, -6, 6);
  std::vector<float> out(N * F, 1e30f);
  swiglu_forward(out.data(), gu.data(), N, F);
  std::vector<double> expect(N * F);
  ref::swiglu_forward(expect.data(), to_double(gu).data(), N, F);
  EXPECT_TRUE(within_bound(out, expect, forward_bound(expect), "h"));
}

TEST_P(SwiGluTest, BackwardMatchesFiniteDifferencesAndReference) {
  const auto [N, F] = GetParam();
  const auto gu = random_floats(N * 2 * F, 2, -6, 6);
  const auto r = random_floats(N * F, 3);
  const auto gu_d = to_double(gu), r_d = to_double(r);
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> y(N * F);
    ref::swiglu_forward(y.data(), x.data(), N, F);
    return project(r_d, y);
  };
  const auto fd = testing::numeric_grad(loss, gu_d);
  std::vector<double> ref_grad(N * 2 * F);
  ref::swiglu_backward(ref_grad.data(), r_d.data(), gu_d.data(), N, F);
  // Both double, so not a host's rounding: the truncation h²/6·|f‴| (≈ 1e-11
  // for |g|, |u| ≤ 6) and f's rounding over h (≈ 1e-16·Σ|r·y|/1e-5 ≤ 1e-10)
  // are far below 1e-7 of the floor (1e-2 of the largest gradient).
  EXPECT_LE(rel_error(ref_grad, fd), 1e-7);

  std::vector<float> dgu(N * 2 * F, -4e20f);  // assigned
  swiglu_backward(dgu.data(), r.data(), gu.data(), N, F);
  const auto b = backward_bound(gu_d, r_d, N, F);
  // Against the finite differences dgu is then within b + |ref − fd| (the
  // triangle inequality): a third check would add nothing.
  EXPECT_TRUE(within_bound(dgu, ref_grad, b, "dgu"));
}

INSTANTIATE_TEST_SUITE_P(Shapes, SwiGluTest,
                         ::testing::Values(Shape{1, 7}, Shape{4, 7}, Shape{3, 13}, Shape{2, 1},
                                           Shape{5, 37}));

}  // namespace
}  // namespace mt

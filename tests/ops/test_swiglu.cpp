// SwiGLU activation on the stacked [gate | up] GEMM output.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/reference.h"
#include "ops/swiglu.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::project;
using testing::random_floats;
using testing::rel_error;
using testing::to_double;

TEST(SwiGlu, HandComputedValues) {
  // One row, F = 4: gate in columns 0..3, up in 4..7. silu(1) = 1/(1 + e^−1) = 0.7310585786300049,
  // silu(−1) = −0.2689414213699951, silu(20) = 20 / (1 + e^−20) ≈ 20.
  const std::vector<float> gu = {0, 1, -1, 20, 5, 2, 3, 1};
  std::vector<float> out(4);
  swiglu_forward(out.data(), gu.data(), 1, 4);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_NEAR(out[1], 1.4621171572600098, 2e-7);
  EXPECT_NEAR(out[2], -0.8068242641099853, 2e-7);
  EXPECT_NEAR(out[3], 20.0, 2e-6);
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
  EXPECT_NEAR(out[0], 0.0f, 1e-30);
  EXPECT_NEAR(out[3], 5000.0f, 1e-3);
  EXPECT_NEAR(dgu[3], 5.0f, 1e-6);  // silu'(g) → 1 for large g
  EXPECT_NEAR(dgu[0], 0.0f, 1e-30);
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
  EXPECT_LE(rel_error(out, expect), 1e-6);
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
  EXPECT_LE(rel_error(ref_grad, fd), 1e-7);

  std::vector<float> dgu(N * 2 * F, -4e20f);  // assigned
  swiglu_backward(dgu.data(), r.data(), gu.data(), N, F);
  EXPECT_LE(rel_error(dgu, fd), 1e-5);
  EXPECT_LE(rel_error(dgu, ref_grad), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(Shapes, SwiGluTest,
                         ::testing::Values(Shape{1, 7}, Shape{4, 7}, Shape{3, 13}, Shape{2, 1},
                                           Shape{5, 37}));

}  // namespace
}  // namespace mt

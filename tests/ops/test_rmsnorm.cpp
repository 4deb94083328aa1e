// RMSNorm (Hugging Face Llama semantics) forward and backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "bounds.h"
#include "ops/reference.h"
#include "ops/rmsnorm.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::project;
using testing::random_floats;
using testing::rel_error;
using testing::to_double;

using testing::gamma_n;
using testing::kU32;
using testing::kU64;
using testing::within_bound;

constexpr float kEps = 1e-5f;

// Bounds of the fp32 kernel (tests/bounds.h), element by element. Forward:
// rstd is the double value rounded once (u, plus γ^double_{C+4} for its sum of
// squares in double), y = (x·r)·w two more roundings: γ_3 relative. Backward,
// dx = a − b with a = r·(w·dy), b = k·x, k = r³·Σ(w·dy)·x / C: a is off by
// γ_3 relatively (rstd, two products), b by γ_5 (rstd cubed, the rounding of
// k, the product) plus the fp32 products w·dy in k's sum (u·Σ|w·dy·x|), and
// the difference by u·(|a| + |b|). dw sums N terms dy·(x·r) (each off by γ_3)
// in fp32 chunks of at most 64 rows, the chunk sums in double, then rounds and
// adds to the prior: γ_{min(N,64)+5} · (Σ_n |dy·x·r| + |prior|).
struct NormBounds {
  std::vector<double> dx, dw;
};
NormBounds norm_bounds(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& dy,
                       const std::vector<double>& rstd, const std::vector<float>& prior, int64_t N,
                       int64_t C) {
  NormBounds b{std::vector<double>(N * C), std::vector<double>(C, 0.0)};
  for (int64_t n = 0; n < N; ++n) {
    const double r = rstd[n];
    double dot_mag = 0.0, dot = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      dot_mag += std::abs(double(w[c]) * dy[n * C + c] * x[n * C + c]);
      dot += double(w[c]) * dy[n * C + c] * x[n * C + c];
    }
    for (int64_t c = 0; c < C; ++c) {
      const double a = std::abs(r * w[c] * dy[n * C + c]);
      const double bx = std::abs(r * r * r * x[n * C + c] / double(C));
      b.dx[n * C + c] =
          gamma_n(4) * a + gamma_n(6) * bx * std::abs(dot) + bx * (kU32 + gamma_n(C, kU64)) * dot_mag;
      b.dw[c] += std::abs(double(dy[n * C + c]) * x[n * C + c] * r);
    }
  }
  for (int64_t c = 0; c < C; ++c)
    b.dw[c] = gamma_n(double(std::min<int64_t>(N, 64) + 5)) * (b.dw[c] + std::abs(double(prior[c])));
  return b;
}

std::vector<double> relative(const std::vector<double>& want, double rel) {
  std::vector<double> b(want.size());
  for (size_t i = 0; i < want.size(); ++i)
    b[i] = rel * std::abs(want[i]) + 1e-300;
  return b;
}

TEST(RmsNorm, HandComputedExample) {
  // x = [2, −2, 2, −2]: mean(x²) = 4, so with eps = 0 rstd = 1/2 and y = x/2 · w.
  const std::vector<float> x = {2, -2, 2, -2}, w = {1, 2, 3, 4};
  std::vector<float> y(4), rstd(1);
  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), 1, 4, 0.0f);
  EXPECT_EQ(rstd[0], 0.5f);
  EXPECT_EQ(y, (std::vector<float>{1, -2, 3, -4}));
  // eps enters under the square root: x = [3, 4] (mean 12.5) with eps = 3.5 gives rstd = 1/4.
  const std::vector<float> x2 = {3, 4}, w2 = {1, 1};
  std::vector<float> y2(2);
  rmsnorm_forward(y2.data(), rstd.data(), x2.data(), w2.data(), 1, 2, 3.5f);
  EXPECT_EQ(rstd[0], 0.25f);
  EXPECT_EQ(y2, (std::vector<float>{0.75f, 1.0f}));
}

struct Shape {
  int64_t N, C;
};

class RmsNormTest : public ::testing::TestWithParam<Shape> {};

TEST_P(RmsNormTest, ForwardMatchesReference) {
  const auto [N, C] = GetParam();
  const auto x = random_floats(N * C, 1, -2, 2);
  const auto w = random_floats(C, 2, 0.5, 1.5);
  std::vector<float> y(N * C, 1e30f), rstd(N);
  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  std::vector<double> ey(N * C), erstd(N);
  ref::rmsnorm_forward(ey.data(), erstd.data(), to_double(x).data(), to_double(w).data(), N, C, kEps);
  EXPECT_TRUE(within_bound(y, ey, relative(ey, gamma_n(3) + gamma_n(C + 4, kU64)), "y: gamma_3"));
  EXPECT_TRUE(within_bound(rstd, erstd, relative(erstd, kU32 + gamma_n(C + 4, kU64)), "rstd: u"));
}

TEST_P(RmsNormTest, BackwardMatchesFiniteDifferencesAndReference) {
  const auto [N, C] = GetParam();
  const auto x = random_floats(N * C, 3, -2, 2);
  const auto w = random_floats(C, 4, 0.5, 1.5);
  const auto r = random_floats(N * C, 5);
  const auto x_d = to_double(x), w_d = to_double(w), r_d = to_double(r);

  auto forward = [&](const std::vector<double>& xx, const std::vector<double>& ww) {
    std::vector<double> y(N * C), rs(N);
    ref::rmsnorm_forward(y.data(), rs.data(), xx.data(), ww.data(), N, C, kEps);
    return project(r_d, y);
  };
  const auto fd_x =
      testing::numeric_grad([&](const std::vector<double>& xx) { return forward(xx, w_d); }, x_d);
  const auto fd_w =
      testing::numeric_grad([&](const std::vector<double>& ww) { return forward(x_d, ww); }, w_d);

  std::vector<double> ry(N * C), rrstd(N), ref_dx(N * C), ref_dw(C, 0.0);
  ref::rmsnorm_forward(ry.data(), rrstd.data(), x_d.data(), w_d.data(), N, C, kEps);
  ref::rmsnorm_backward(ref_dx.data(), ref_dw.data(), r_d.data(), x_d.data(), w_d.data(), rrstd.data(), N, C);
  // Both double, so not a host's rounding: central differences' truncation
  // h²/6·|f‴| (≈ 2e-11 for these O(1) inputs) and the rounding of f over h
  // (≈ 1e-16·Σ|r·y|/1e-5 ≤ 1e-10) are far below 1e-7 of the floor (1e-2 of the
  // largest gradient), and a wrong formula is O(1).
  EXPECT_LE(rel_error(ref_dx, fd_x), 1e-7);
  EXPECT_LE(rel_error(ref_dw, fd_w), 1e-7);

  std::vector<float> y(N * C), rstd(N);
  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  std::vector<float> dx(N * C, 3e20f);  // assigned
  const auto dw_prior = random_floats(C, 6);
  std::vector<float> dw = dw_prior;  // accumulated
  rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), N, C);
  std::vector<double> dw_delta(C);
  for (int64_t c = 0; c < C; ++c)
    dw_delta[c] = static_cast<double>(dw[c]) - dw_prior[c];
  const auto bd = norm_bounds(x, w, r, rrstd, dw_prior, N, C);
  EXPECT_TRUE(within_bound(dx, ref_dx, bd.dx, "dx"));
  // Against the finite differences dx and dw are then within their bounds plus
  // |ref − fd| (the triangle inequality): a third check would add nothing.
  EXPECT_TRUE(within_bound(dw_delta, ref_dw, bd.dw, "dw"));
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsNormTest,
                         ::testing::Values(Shape{1, 13}, Shape{5, 13}, Shape{3, 2}, Shape{70, 7},
                                           Shape{2, 130}));

// More rows than one 64-row chunk and more channels than one 64-channel block:
// the dweight reduction is checked for accuracy and for bitwise independence
// of the thread count.
TEST(RmsNorm, WeightGradientIsAccurateAndBitwiseIndependentOfThreadCount) {
  const int64_t N = 300, C = 200;
  const auto x = random_floats(N * C, 7, -2, 2);
  const auto w = random_floats(C, 8, 0.5, 1.5);
  const auto dy = random_floats(N * C, 9);
  std::vector<float> y(N * C), rstd(N);
  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, kEps);

  std::vector<double> ref_dx(N * C), ref_dw(C, 0.0);
  ref::rmsnorm_backward(ref_dx.data(), ref_dw.data(), to_double(dy).data(), to_double(x).data(),
                        to_double(w).data(), to_double(rstd).data(), N, C);
  std::vector<float> first_dx, first_dw;
  for (int threads : {1, 2, 3, 4}) {
    testing::ThreadScope scope(threads);
    std::vector<float> dx(N * C), dw(C, 0.0f);
    rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
    if (first_dw.empty()) {
      first_dx = dx;
      first_dw = dw;
      const auto bd = norm_bounds(x, w, dy, to_double(rstd), std::vector<float>(C, 0.0f), N, C);
      EXPECT_TRUE(within_bound(dx, ref_dx, bd.dx, "dx, 300 rows"));
      EXPECT_TRUE(within_bound(dw, ref_dw, bd.dw, "dw, 300 rows"));
    } else {
      EXPECT_EQ(dx, first_dx) << threads << " threads";
      EXPECT_EQ(dw, first_dw) << threads << " threads";
    }
  }
}

TEST(RmsNorm, NullWeightGradientIsSkipped) {
  const int64_t N = 4, C = 13;
  const auto x = random_floats(N * C, 10), w = random_floats(C, 11), dy = random_floats(N * C, 12);
  std::vector<float> y(N * C), rstd(N), dx(N * C), dx2(N * C), dw(C, 0.0f);
  rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, kEps);
  rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  rmsnorm_backward(dx2.data(), nullptr, dy.data(), x.data(), w.data(), rstd.data(), N, C);
  EXPECT_EQ(dx, dx2);
}

}  // namespace
}  // namespace mt

// Softmax cross-entropy with an ignore index.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "bounds.h"
#include "core/error.h"
#include "ops/cross_entropy.h"
#include "ops/reference.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::random_floats;
using testing::random_ints;
using testing::rel_error;
using testing::to_double;

using testing::gamma_n;
using testing::kU32;
using testing::within_bound;

constexpr int32_t kIgnore = -100;
constexpr double kExpRel = 0x1p-22;  // exp_vec's relative error, 2 ulp (test_vec_math.cpp)

// Bounds of the fp32 kernel, per row with range R = max − min of its logits:
// each exp(x_v − m) is off by u·R (the rounded argument) + kExpRel, the block
// sums of up to 256 positive terms by γ_256 (relative, any order), so log s
// and lse are off by δ = u·R + kExpRel + γ_min(V,256) + u|lse| absolutely, and
// a loss l − x_t by δ + u|loss|. The gradient dloss·p_v is off by p_v·(δ_lse
// + u|x_v − lse| + kExpRel + 2u) (argument, exp, product, dloss's rounding);
// at the target dloss·(p_t − 1) also by 2u·|p_t − 1|.
struct CeBounds {
  std::vector<double> loss, lse, grad;
};
CeBounds ce_bounds(const std::vector<float>& x, const std::vector<int32_t>& t, const std::vector<double>& lse,
                   const std::vector<double>& loss, double dloss, int64_t N, int64_t V) {
  CeBounds b{std::vector<double>(N), std::vector<double>(N), std::vector<double>(N * V)};
  for (int64_t n = 0; n < N; ++n) {
    const auto row = x.begin() + n * V;
    const double R = double(*std::max_element(row, row + V)) - double(*std::min_element(row, row + V));
    const double d_lse =
        kU32 * R + kExpRel + gamma_n(double(std::min<int64_t>(V, 256))) + kU32 * std::abs(lse[n]);
    b.lse[n] = d_lse;
    b.loss[n] = d_lse + kU32 * std::abs(loss[n]) + 1e-300;
    for (int64_t v = 0; v < V; ++v) {
      const double p = std::exp(double(row[v]) - lse[n]);
      double e =
          std::abs(dloss) * p * (d_lse + kU32 * std::abs(double(row[v]) - lse[n]) + kExpRel + 2 * kU32);
      if (v == t[n]) e += std::abs(dloss) * 2 * kU32 * std::abs(p - 1.0);
      b.grad[n * V + v] = t[n] == kIgnore ? 1e-300 : e * (1 + 1e-6);
    }
  }
  return b;
}

TEST(CrossEntropy, HandComputedValues) {
  // Equal logits: loss = log V whatever the target.
  const std::vector<float> flat(4, 0.3f);
  const int32_t t2 = 2;
  float loss = 0, lse = 0;
  cross_entropy_forward(&loss, &lse, flat.data(), &t2, 1, 4, kIgnore);
  // The ce_bounds derivation with R = 0 and V = 4; 0.3f is 0.3 within u·0.3.
  const double d = kExpRel + gamma_n(4) + kU32 * 1.7;
  EXPECT_TRUE(within_bound(loss, 1.3862943611198906, d + kU32 * (1.39 + 0.3), "hand loss"));
  EXPECT_TRUE(within_bound(lse, 0.3 + 1.3862943611198906, d + kU32 * 0.3, "hand lse"));

  // logits [0, ln 3]: softmax = [1/4, 3/4]; target 0 → loss ln 4, dlogits = dloss · [−3/4, 3/4].
  const std::vector<float> logits = {0.0f, static_cast<float>(std::log(3.0))};
  const int32_t t0 = 0;
  cross_entropy_forward(&loss, &lse, logits.data(), &t0, 1, 2, kIgnore);
  // R = ln 3, V = 2; float(ln 3) is ln 3 within u·ln 3, which moves the loss by at most that.
  const double d2 = kU32 * 1.1 + kExpRel + gamma_n(2) + kU32 * 1.39 + kU32 * 1.1;
  EXPECT_TRUE(within_bound(loss, 1.3862943611198906, d2 + kU32 * 1.39, "hand loss 2"));
  std::vector<float> g(2);
  cross_entropy_backward(g.data(), logits.data(), &lse, &t0, 2.0f, 1, 2, kIgnore);
  // 2·p_v·(δ_lse + u·|x_v − lse| + kExpRel + 2u) (dloss = 2 is exact), + 2·2u·|p_t − 1| at the target.
  EXPECT_TRUE(within_bound(g[0], -1.5, 2 * 0.25 * (d2 + kU32 * 1.39 + kExpRel + 2 * kU32) + 4 * kU32 * 0.75,
                           "hand dlogits target"));
  EXPECT_TRUE(within_bound(g[1], 1.5, 2 * 0.75 * (d2 + kU32 * 0.3 + kExpRel + 2 * kU32), "hand dlogits"));
}

struct Shape {
  int64_t N, V;
};

class CrossEntropyTest : public ::testing::TestWithParam<Shape> {
 protected:
  // Targets in [0, V) with rows 1 and 4 (when present) ignored.
  std::vector<int32_t> targets(uint32_t seed) const {
    auto t = random_ints(GetParam().N, seed, 0, static_cast<int32_t>(GetParam().V) - 1);
    for (size_t n : {size_t{1}, size_t{4}}) {
      if (n < t.size()) t[n] = kIgnore;
    }
    return t;
  }
};

TEST_P(CrossEntropyTest, ForwardMatchesReference) {
  const auto [N, V] = GetParam();
  const auto logits = random_floats(N * V, 1, -8, 8);
  const auto t = targets(2);
  std::vector<float> losses(N, 1e30f), lse(N);
  cross_entropy_forward(losses.data(), lse.data(), logits.data(), t.data(), N, V, kIgnore);
  std::vector<double> el(N), expect_lse(N);
  ref::cross_entropy_forward(el.data(), expect_lse.data(), to_double(logits).data(), t.data(), N, V, kIgnore);
  const auto b = ce_bounds(logits, t, expect_lse, el, 1.0, N, V);
  EXPECT_TRUE(within_bound(losses, el, b.loss, "loss"));
  EXPECT_TRUE(within_bound(lse, expect_lse, b.lse, "lse"));
  for (int64_t n = 0; n < N; ++n) {
    if (t[n] == kIgnore) {
      EXPECT_EQ(losses[n], 0.0f);
    }
  }
}

TEST_P(CrossEntropyTest, BackwardMatchesFiniteDifferencesAndReference) {
  const auto [N, V] = GetParam();
  const auto logits = random_floats(N * V, 3, -8, 8);
  const auto t = targets(4);
  const double dloss = 0.37;
  auto loss = [&](const std::vector<double>& x) {
    std::vector<double> l(N), s(N);
    ref::cross_entropy_forward(l.data(), s.data(), x.data(), t.data(), N, V, kIgnore);
    double sum = 0;
    for (double v : l)
      sum += v;
    return dloss * sum;
  };
  const auto fd = testing::numeric_grad(loss, to_double(logits));
  std::vector<double> rl(N), rlse(N), ref_grad(N * V);
  ref::cross_entropy_forward(rl.data(), rlse.data(), to_double(logits).data(), t.data(), N, V, kIgnore);
  ref::cross_entropy_backward(ref_grad.data(), to_double(logits).data(), rlse.data(), t.data(), dloss, N, V,
                              kIgnore);
  // Both double, so no host's rounding: central differences' truncation
  // h²/6·|f‴| with |∂³ lse| ≤ 1 per row is 1.7e-11·dloss, the rounding of f
  // ≈ 1e-16·Σ|loss|/h ≤ 1e-9; 1e-7 relative to 1e-2 of the largest gradient
  // (rel_error's floor) is ≥ 1e-9 absolute, and a wrong formula is O(1).
  EXPECT_LE(rel_error(ref_grad, fd), 1e-7);

  std::vector<float> losses(N), lse(N), d(N * V, 5e20f);  // assigned
  cross_entropy_forward(losses.data(), lse.data(), logits.data(), t.data(), N, V, kIgnore);
  cross_entropy_backward(d.data(), logits.data(), lse.data(), t.data(), static_cast<float>(dloss), N, V,
                         kIgnore);
  {
    const auto b = ce_bounds(logits, t, rlse, rl, dloss, N, V);
    EXPECT_TRUE(within_bound(d, ref_grad, b.grad, "dlogits"));
    // Against the finite differences d is then within b.grad + |ref − fd|
    // (the triangle inequality): a third check would add nothing.
  }
  for (int64_t n = 0; n < N; ++n) {
    if (t[n] != kIgnore) continue;
    for (int64_t v = 0; v < V; ++v)
      EXPECT_EQ(d[n * V + v], 0.0f);
  }

  // In place gives the same bits.
  auto inplace = logits;
  cross_entropy_backward(inplace.data(), inplace.data(), lse.data(), t.data(), static_cast<float>(dloss), N,
                         V, kIgnore);
  EXPECT_EQ(inplace, d);
}

INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyTest,
                         ::testing::Values(Shape{1, 37}, Shape{6, 37}, Shape{5, 13}, Shape{3, 2}));

TEST(CrossEntropy, LargeVocabularyMatchesReference) {
  const int64_t N = 3, V = 5000;
  const auto logits = random_floats(N * V, 5, -20, 20);
  const std::vector<int32_t> t = {0, 4999, 1234};
  std::vector<float> losses(N), lse(N), d(N * V);
  cross_entropy_forward(losses.data(), lse.data(), logits.data(), t.data(), N, V, kIgnore);
  cross_entropy_backward(d.data(), logits.data(), lse.data(), t.data(), 1.0f, N, V, kIgnore);
  std::vector<double> el(N), expect_lse(N), ed(N * V);
  ref::cross_entropy_forward(el.data(), expect_lse.data(), to_double(logits).data(), t.data(), N, V, kIgnore);
  ref::cross_entropy_backward(ed.data(), to_double(logits).data(), expect_lse.data(), t.data(), 1.0, N, V,
                              kIgnore);
  const auto b = ce_bounds(logits, t, expect_lse, el, 1.0, N, V);
  EXPECT_TRUE(within_bound(losses, el, b.loss, "loss, V 5000"));
  EXPECT_TRUE(within_bound(d, ed, b.grad, "dlogits, V 5000"));
}

TEST(CrossEntropy, AllIgnoredGivesZeroLossAndZeroGradient) {
  const int64_t N = 3, V = 7;
  const auto logits = random_floats(N * V, 6);
  const std::vector<int32_t> t(N, kIgnore);
  std::vector<float> losses(N, 9.0f), lse(N), d(N * V, 9.0f);
  cross_entropy_forward(losses.data(), lse.data(), logits.data(), t.data(), N, V, kIgnore);
  cross_entropy_backward(d.data(), logits.data(), lse.data(), t.data(), 1.0f, N, V, kIgnore);
  EXPECT_EQ(losses, std::vector<float>(N, 0.0f));
  EXPECT_EQ(d, std::vector<float>(N * V, 0.0f));
}

TEST(CrossEntropy, HugeLogitsAreStable) {
  // Without the max subtraction exp(1e4) overflows.
  const std::vector<float> logits = {1e4f, -1e4f, 0.0f, 5e3f};
  const int32_t t = 1;
  float loss = 0, lse = 0;
  cross_entropy_forward(&loss, &lse, logits.data(), &t, 1, 4, kIgnore);
  EXPECT_EQ(lse, 1e4f);
  EXPECT_EQ(loss, 2e4f);
  std::vector<float> d(4);
  cross_entropy_backward(d.data(), logits.data(), &lse, &t, 1.0f, 1, 4, kIgnore);
  EXPECT_EQ(d, (std::vector<float>{1.0f, -1.0f, 0.0f, 0.0f}));
}

TEST(CrossEntropy, RejectsTargetOutsideVocabulary) {
  const std::vector<float> logits(4, 0.0f);
  float loss = 0, lse = 0;
  const int32_t t = 4;
  EXPECT_THROW(cross_entropy_forward(&loss, &lse, logits.data(), &t, 1, 4, kIgnore), Error);
}

}  // namespace
}  // namespace mt

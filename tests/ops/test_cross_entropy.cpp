// Softmax cross-entropy with an ignore index.
#include <gtest/gtest.h>

#include <cmath>

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

constexpr int32_t kIgnore = -100;

TEST(CrossEntropy, HandComputedValues) {
  // Equal logits: loss = log V whatever the target.
  const std::vector<float> flat(4, 0.3f);
  const int32_t t2 = 2;
  float loss = 0, lse = 0;
  cross_entropy_forward(&loss, &lse, flat.data(), &t2, 1, 4, kIgnore);
  EXPECT_NEAR(loss, 1.3862943611198906, 1e-6);
  EXPECT_NEAR(lse, 0.3 + 1.3862943611198906, 1e-6);

  // logits [0, ln 3]: softmax = [1/4, 3/4]; target 0 → loss ln 4, dlogits = dloss · [−3/4, 3/4].
  const std::vector<float> logits = {0.0f, static_cast<float>(std::log(3.0))};
  const int32_t t0 = 0;
  cross_entropy_forward(&loss, &lse, logits.data(), &t0, 1, 2, kIgnore);
  EXPECT_NEAR(loss, 1.3862943611198906, 1e-6);
  std::vector<float> d(2);
  cross_entropy_backward(d.data(), logits.data(), &lse, &t0, 2.0f, 1, 2, kIgnore);
  EXPECT_NEAR(d[0], -1.5, 1e-6);
  EXPECT_NEAR(d[1], 1.5, 1e-6);
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
  EXPECT_LE(rel_error(losses, el), 1e-6);
  EXPECT_LE(rel_error(lse, expect_lse), 1e-6);
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
  EXPECT_LE(rel_error(ref_grad, fd), 1e-7);

  std::vector<float> losses(N), lse(N), d(N * V, 5e20f);  // assigned
  cross_entropy_forward(losses.data(), lse.data(), logits.data(), t.data(), N, V, kIgnore);
  cross_entropy_backward(d.data(), logits.data(), lse.data(), t.data(), static_cast<float>(dloss), N, V,
                         kIgnore);
  EXPECT_LE(rel_error(d, fd), 1e-5);
  EXPECT_LE(rel_error(d, ref_grad), 1e-5);
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
  EXPECT_LE(rel_error(losses, el), 1e-6);
  EXPECT_LE(rel_error(d, ed), 1e-5);
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

// Rotary position embedding (Hugging Face rotate-half convention).
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "ops/reference.h"
#include "ops/rope.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::project;
using testing::random_floats;
using testing::rel_error;
using testing::to_double;

constexpr double kTheta = 10000.0;

TEST(Rope, TableHoldsCosAndSinOfPositionTimesFrequency) {
  const RopeTable table(1001, 6, kTheta);
  EXPECT_EQ(table.head_dim(), 6);
  EXPECT_EQ(table.max_pos(), 1001);
  // Frequencies of D = 6: 1, 10000^(−1/3), 10000^(−2/3).
  const double freq[3] = {1.0, std::pow(10000.0, -1.0 / 3.0), std::pow(10000.0, -2.0 / 3.0)};
  for (int64_t p : {0, 1, 7, 1000}) {
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(table.cos_row(p)[i], std::cos(static_cast<double>(p) * freq[i]), 1e-7) << p << " " << i;
      EXPECT_NEAR(table.sin_row(p)[i], std::sin(static_cast<double>(p) * freq[i]), 1e-7) << p << " " << i;
    }
  }
}

TEST(Rope, HandComputedRotateHalf) {
  // D = 4: pair 0 is (x0, x2) with frequency 1, pair 1 is (x1, x3) with frequency 10000^(−1/2) = 0.01.
  const RopeTable table(8, 4, kTheta);
  std::vector<float> x = {1, 2, 3, 4};
  const int32_t pos = 2;
  rope_forward(x.data(), &pos, table, 1, 1, 4);
  const double a0 = 2.0, a1 = 0.02;
  EXPECT_NEAR(x[0], 1 * std::cos(a0) - 3 * std::sin(a0), 1e-6);
  EXPECT_NEAR(x[2], 3 * std::cos(a0) + 1 * std::sin(a0), 1e-6);
  EXPECT_NEAR(x[1], 2 * std::cos(a1) - 4 * std::sin(a1), 1e-6);
  EXPECT_NEAR(x[3], 4 * std::cos(a1) + 2 * std::sin(a1), 1e-6);
}

TEST(Rope, PositionZeroIsTheIdentity) {
  const RopeTable table(4, 6, kTheta);
  const auto x0 = random_floats(2 * 12, 1);
  auto x = x0;
  const std::vector<int32_t> pos = {0, 0};
  rope_forward(x.data(), pos.data(), table, 2, 2, 12);
  EXPECT_EQ(x, x0);
}

struct Case {
  int64_t head_dim, n_heads;
};

class RopeTest : public ::testing::TestWithParam<Case> {
 protected:
  // Out of order and large positions; rows wider than the heads (as in a fused
  // qkv buffer): the padding must be left alone.
  const std::vector<int32_t> pos_ = {1000, 3, 0, 17, 999, 5, 1};
  int64_t N() const { return static_cast<int64_t>(pos_.size()); }
  int64_t stride() const { return GetParam().n_heads * GetParam().head_dim + 5; }
};

TEST_P(RopeTest, ForwardMatchesReferenceAndLeavesPaddingAlone) {
  const auto [D, H] = GetParam();
  const RopeTable table(1001, D, kTheta);
  const auto x0 = random_floats(N() * stride(), 2, -2, 2);
  auto x = x0;
  rope_forward(x.data(), pos_.data(), table, N(), H, stride());
  auto expect = to_double(x0);
  ref::rope_forward(expect.data(), pos_.data(), N(), H, D, stride(), kTheta);
  EXPECT_LE(rel_error(x, expect), 1e-6);
  for (int64_t n = 0; n < N(); ++n) {
    for (int64_t c = H * D; c < stride(); ++c)
      EXPECT_EQ(x[n * stride() + c], x0[n * stride() + c]);
  }
}

TEST_P(RopeTest, BackwardMatchesFiniteDifferencesAndReference) {
  const auto [D, H] = GetParam();
  const RopeTable table(1001, D, kTheta);
  const auto x = random_floats(N() * stride(), 3, -2, 2);
  const auto r = random_floats(N() * stride(), 4);
  const auto r_d = to_double(r);
  auto loss = [&](std::vector<double> xx) {
    ref::rope_forward(xx.data(), pos_.data(), N(), H, D, stride(), kTheta);
    return project(r_d, xx);
  };
  const auto fd = testing::numeric_grad(loss, to_double(x));
  auto ref_grad = r_d;
  ref::rope_backward(ref_grad.data(), pos_.data(), N(), H, D, stride(), kTheta);
  EXPECT_LE(rel_error(ref_grad, fd), 1e-7);

  auto dx = r;
  rope_backward(dx.data(), pos_.data(), table, N(), H, stride());
  EXPECT_LE(rel_error(dx, fd), 1e-5);
  EXPECT_LE(rel_error(dx, ref_grad), 1e-5);
}

TEST_P(RopeTest, BackwardUndoesForward) {
  const auto [D, H] = GetParam();
  const RopeTable table(1001, D, kTheta);
  const auto x0 = random_floats(N() * stride(), 5, -2, 2);
  auto x = x0;
  rope_forward(x.data(), pos_.data(), table, N(), H, stride());
  rope_backward(x.data(), pos_.data(), table, N(), H, stride());
  EXPECT_LE(rel_error(x, x0), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Heads, RopeTest, ::testing::Values(Case{2, 1}, Case{2, 3}, Case{6, 3}, Case{64, 2}));

TEST(Rope, RejectsBadConfiguration) {
  EXPECT_THROW(RopeTable(16, 5, kTheta), ConfigError);
  EXPECT_THROW(RopeTable(16, 0, kTheta), ConfigError);
  EXPECT_THROW(RopeTable(0, 4, kTheta), ConfigError);
  const RopeTable table(16, 4, kTheta);
  std::vector<float> x(8);
  const int32_t too_far = 16;
  EXPECT_THROW(rope_forward(x.data(), &too_far, table, 1, 2, 8), Error);
  const int32_t ok = 3;
  EXPECT_THROW(rope_forward(x.data(), &ok, table, 1, 3, 8), Error);  // 3 heads × 4 > stride 8
}

}  // namespace
}  // namespace mt

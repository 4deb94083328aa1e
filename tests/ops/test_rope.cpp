// Rotary position embedding (Hugging Face rotate-half convention).
#include <gtest/gtest.h>

#include <cmath>

#include "bounds.h"
#include "core/error.h"
#include "ops/reference.h"
#include "ops/rope.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::project;
using testing::random_floats;
using testing::to_double;

using testing::gamma_n;
using testing::kU32;
using testing::kU64;
using testing::within_bound;

constexpr double kTheta = 10000.0;

// Bounds (no sums, so no order to depend on): a table entry is the double
// cos or sin rounded once, u·|value|, plus the angle p·freq's own double error
// (the frequency by pow or by rope_inv_freq, then the product: 16·u64·|angle|
// covers both). A rotated pair (a·c − b·s, b·c + a·s) adds two products and
// a sum: γ_3 · (|a·c| + |b·s|) + (|a| + |b|) · 16·u64·|angle| per element.
double angle_error(double angle) {
  return 16 * kU64 * std::abs(angle);
}

// The bound of each element of x (N rows of `stride`, H heads of D) rotated
// by the angles of pos; padding gets none (it must be unchanged).
std::vector<double> rotation_bound(const std::vector<float>& x, const std::vector<int32_t>& pos, int64_t D,
                                   int64_t H, int64_t stride) {
  std::vector<double> b(x.size(), 1e-300);
  const int64_t half = D / 2;
  for (size_t n = 0; n < pos.size(); ++n) {
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const double angle = pos[n] * std::pow(kTheta, -2.0 * double(i) / double(D));
        const size_t lo = n * size_t(stride) + size_t(h * D + i), hi = lo + size_t(half);
        const double a = x[lo], bb = x[hi], c = std::abs(std::cos(angle)), s_ = std::abs(std::sin(angle));
        const double extra = (std::abs(a) + std::abs(bb)) * angle_error(angle);
        b[lo] = gamma_n(3) * (std::abs(a) * c + std::abs(bb) * s_) + extra;
        b[hi] = gamma_n(3) * (std::abs(bb) * c + std::abs(a) * s_) + extra;
      }
    }
  }
  return b;
}

TEST(Rope, TableHoldsCosAndSinOfPositionTimesFrequency) {
  const RopeTable table(1001, 6, kTheta);
  EXPECT_EQ(table.head_dim(), 6);
  EXPECT_EQ(table.max_pos(), 1001);
  // Frequencies of D = 6: 1, 10000^(−1/3), 10000^(−2/3).
  const double freq[3] = {1.0, std::pow(10000.0, -1.0 / 3.0), std::pow(10000.0, -2.0 / 3.0)};
  for (int64_t p : {0, 1, 7, 1000}) {
    for (int i = 0; i < 3; ++i) {
      const double a = static_cast<double>(p) * freq[i], c = std::cos(a), sn = std::sin(a);
      EXPECT_TRUE(within_bound(table.cos_row(p)[i], c, kU32 * std::abs(c) + angle_error(a), "cos: u")) << p;
      EXPECT_TRUE(within_bound(table.sin_row(p)[i], sn, kU32 * std::abs(sn) + angle_error(a), "sin: u")) << p;
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
  const auto b = rotation_bound({1, 2, 3, 4}, {pos}, 4, 1, 4);
  EXPECT_TRUE(within_bound(x[0], 1 * std::cos(a0) - 3 * std::sin(a0), b[0], "hand rotation"));
  EXPECT_TRUE(within_bound(x[2], 3 * std::cos(a0) + 1 * std::sin(a0), b[2], "hand rotation"));
  EXPECT_TRUE(within_bound(x[1], 2 * std::cos(a1) - 4 * std::sin(a1), b[1], "hand rotation"));
  EXPECT_TRUE(within_bound(x[3], 4 * std::cos(a1) + 2 * std::sin(a1), b[3], "hand rotation"));
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
  EXPECT_TRUE(within_bound(x, expect, rotation_bound(x0, pos_, D, H, stride()), "rotation"));
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
  // f is linear in x: central differences have no truncation error, only
  // f's double rounding (γ^double_{2 + N·stride} · Σ|r|·(|a| + |b|)) over h.
  double mag = 0.0;
  for (size_t i = 0; i < x.size(); ++i)
    mag += std::abs(r_d[i]) * 2 * 2;  // |a| + |b| ≤ 4 for inputs in [−2, 2]
  const double df = gamma_n(double(2 + N() * stride()), kU64) * mag;
  EXPECT_TRUE(within_bound(ref_grad, fd, testing::fd_bound(to_double(x), ref_grad, df), "ref vs fd"));

  auto dx = r;
  rope_backward(dx.data(), pos_.data(), table, N(), H, stride());
  auto b = rotation_bound(r, pos_, D, H, stride());
  EXPECT_TRUE(within_bound(dx, ref_grad, b, "backward rotation"));
  // Against the finite differences dx is then within b + |ref − fd| (the
  // triangle inequality): a third check would add nothing.
}

TEST_P(RopeTest, BackwardUndoesForward) {
  const auto [D, H] = GetParam();
  const RopeTable table(1001, D, kTheta);
  const auto x0 = random_floats(N() * stride(), 5, -2, 2);
  auto x = x0;
  rope_forward(x.data(), pos_.data(), table, N(), H, stride());
  rope_backward(x.data(), pos_.data(), table, N(), H, stride());
  // Each rotation is off by at most γ_3·(|a| + |b|) per element (table
  // entries within u), the exact rotations are orthogonal and |a'| + |b'| ≤
  // √2·(|a| + |b|): |x'' − x| ≤ (2 + √2)·γ_3·(|a| + |b|)·(1 + γ_3) per element.
  std::vector<double> b(x0.size(), 1e-300);
  for (int64_t n = 0; n < N(); ++n)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < D / 2; ++i) {
        const size_t lo = size_t(n * stride() + h * D + i), hi = lo + size_t(D / 2);
        b[lo] = b[hi] =
            (2 + std::sqrt(2.0)) * gamma_n(3) * (std::abs(x0[lo]) + std::abs(x0[hi])) * (1 + gamma_n(3));
      }
  EXPECT_TRUE(within_bound(x, to_double(x0), b, "round trip"));
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

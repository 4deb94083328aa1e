#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "core/threads.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "optim_bounds.h"

namespace mt {
namespace {

TEST(AdamW, Seed004FirstStepMovesBothCoordinatesEqually) {
  // Seed 004 §4: L = ½(100x² + y²) at [1, 1] has gradient [100, 1]; after bias
  // correction m̂ = [100, 1], v̂ = [10000, 1], so m̂/√v̂ = [1, 1]: both move by lr.
  OptimizerOptions o;
  o.adam = {0.9, /*beta2 as in the seed=*/0.99, 1e-8, 0.0};
  Optimizer adam(2, o, {{0, 2, true}});
  std::vector<float> p = {1.0f, 1.0f}, g = {100.0f, 1.0f};
  adam.step(p.data(), g.data(), /*lr=*/0.1);
  // Exactly: θ = 1 − 0.1 · |g| / (|g| + 1e-8); within optim_bounds.h's bound
  // of the fp32 direction plus the update's roundings (lr·(δdir + 2u·|dir|)
  // + u·|θ|), so also within the sum of the two of each other.
  testing::AdamDirectionBound dir(2, 0.9, 0.99, 1e-8);
  double bound[2], want[2];
  for (size_t i = 0; i < 2; ++i) {
    const auto [d, dd] = dir.step(i, g[i], 1);
    want[i] = 1.0 - 0.1 * d;
    bound[i] = 1.01 * (0.1 * (dd + 2 * testing::kU32 * std::abs(d)) + testing::kU32 * std::abs(want[i]));
  }
  EXPECT_TRUE(testing::within_bound(p[0], want[0], bound[0], "seed 004 x"));
  EXPECT_TRUE(testing::within_bound(p[1], want[1], bound[1], "seed 004 y"));
  EXPECT_TRUE(testing::within_bound(p[0], p[1], bound[0] + bound[1] + std::abs(want[0] - want[1]), "x vs y"));
  // SGD at the same rate overshoots x: the seed's [-9, 0.9].
  o.kind = OptimizerKind::sgd;
  Optimizer sgd(2, o, {{0, 2, true}});
  p = {1.0f, 1.0f};
  g = {100.0f, 1.0f};
  sgd.step(p.data(), g.data(), 0.1);
  EXPECT_FLOAT_EQ(p[0], -9.0f);
  EXPECT_FLOAT_EQ(p[1], 0.9f);
  EXPECT_EQ(sgd.state_count(), 0);  // no momentum, no state
}

TEST(AdamW, MatchesDoubleReferenceOverStepsWithDecayRanges) {
  const int64_t n = 10;
  std::vector<float> p(n), g(n);
  std::vector<double> rp(n), rm(n, 0.0), rv(n, 0.0);
  for (int64_t i = 0; i < n; ++i)
    rp[i] = p[i] = 0.1f * static_cast<float>(i) - 0.3f;
  OptimizerOptions o;
  o.adam = {0.9, 0.95, 1e-8, 0.1};
  Optimizer opt(n, o, {{0, 4, false}, {4, 6, true}});
  testing::AdamDirectionBound bound(n, 0.9, 0.95, 1e-8);
  std::vector<double> dp(n, 0.0);
  for (int t = 1; t <= 5; ++t) {
    for (int64_t i = 0; i < n; ++i)
      g[i] = std::sin(static_cast<float>(i * t)) * (i % 3 == 0 ? 10.0f : 0.01f);
    const double lr = 1e-2 * t;
    opt.step(p.data(), g.data(), lr);
    for (int64_t i = 0; i < n; ++i) {
      const double wd = i < 4 ? 0.0 : 0.1;
      rm[i] = 0.9 * rm[i] + 0.1 * g[i];
      rv[i] = 0.95 * rv[i] + 0.05 * static_cast<double>(g[i]) * g[i];
      const double mh = rm[i] / (1 - std::pow(0.9, t)), vh = rv[i] / (1 - std::pow(0.95, t));
      // θ − decay·θ − lr·dir in fp32: decay = fl(lr·λ) and its product (2u),
      // the difference (u), lr's rounding and its product (2u on lr·|dir|),
      // the last difference (u·|θ_new|); an earlier error carries (1 − lr·λ).
      const auto [dir, d_dir] = bound.step(size_t(i), g[i], t);
      const double u = testing::kU32, decay = lr * wd, p_old = rp[i];
      rp[i] = rp[i] - lr * wd * rp[i] - lr * mh / (std::sqrt(vh) + 1e-8);
      dp[i] = dp[i] * (1 + decay) + 2 * u * std::abs(decay * p_old) + u * std::abs(p_old - decay * p_old) +
              lr * (d_dir + 2 * u * std::abs(dir)) + u * std::abs(rp[i]);
    }
  }
  for (int64_t i = 0; i < n; ++i)
    EXPECT_TRUE(testing::within_bound(p[i], rp[i], 1.01 * dp[i] + 1e-300, "adamw 5 steps"))
        << "element " << i;
  EXPECT_EQ(opt.steps_taken(), 5);
}

TEST(LrSchedule, WarmupThenCosineToMin) {
  LrSchedule s{1.0, 0.1, 4, 14};
  EXPECT_DOUBLE_EQ(s.at(0), 0.25);
  EXPECT_DOUBLE_EQ(s.at(3), 1.0);
  EXPECT_DOUBLE_EQ(s.at(4), 1.0);  // start of decay
  // Double against double (a cos and a few roundings of O(1) values, within
  // 1e-15): 1e-12 is a plain margin; a wrong phase is off by 1e-2.
  EXPECT_NEAR(s.at(13), 0.1, 1e-12);  // last step reaches min_lr
  const double mid = 0.1 + 0.45 * (1 + std::cos(std::numbers::pi * 4.0 / 9.0));
  EXPECT_NEAR(s.at(8), mid, 1e-12);
  for (int64_t i = 4; i < 13; ++i)
    EXPECT_GE(s.at(i), s.at(i + 1));
}

TEST(Clip, SumSquaresAndScale) {
  std::vector<float> g(10001);
  double ref = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = static_cast<float>((i % 7) - 3) * 0.5f;
    ref += static_cast<double>(g[i]) * g[i];
  }
  // Every g² is a multiple of 1/4 and every partial sum below 2⁵³/4: exact in
  // double in any order.
  EXPECT_EQ(sum_squares(g.data(), 10001), ref);
  const double norm = std::sqrt(ref);
  EXPECT_DOUBLE_EQ(clip_by_norm(g.data(), 10001, norm, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(clip_by_norm(g.data(), 10001, norm, norm * 2), 1.0);
  const double f = clip_by_norm(g.data(), 10001, norm, 1.0);
  EXPECT_EQ(f, 1.0 / (norm + 1e-6));  // max_norm / (norm + 1e-6), the same double expression
  // Each g·fl(f) is off by 2u relatively (f's rounding, the product), so the
  // norm is off by 2u at most, and f itself is 1/norm within 1e-6/norm.
  EXPECT_TRUE(testing::within_bound(std::sqrt(sum_squares(g.data(), 10001)), 1.0,
                                    2 * testing::kU32 + 1e-6 / norm + 1e-15, "clipped norm"));
}

// sum_squares's order is fixed (clip.h): chunks of 4096 elements, each summed
// in element order, the chunk sums added in chunk order. The kernel sums 16
// chunks side by side in vector lanes; this checks bit for bit against the
// order written out plainly, for every thread count, on data whose sums round
// differently in any other order (checked too), and on sizes with whole groups
// of chunks, leftover whole chunks and a partial last chunk.
TEST(Clip, SumSquaresIsInItsStatedOrderBitForBit) {
  constexpr int64_t kChunk = 4096;
  const int previous_threads = num_threads();
  for (const int64_t n :
       {int64_t{16} * kChunk * 3 + kChunk * 5 + 123, int64_t{16} * kChunk, int64_t{4097}, int64_t{7}}) {
    std::vector<float> g(static_cast<size_t>(n));
    uint32_t state = 12345;
    for (float& x : g) {  // a wide range of magnitudes: every partial sum rounds
      state = state * 1664525u + 1013904223u;
      const float mant = static_cast<float>(state >> 8) / 16777216.0f;
      x = std::ldexp(mant + 0.5f, static_cast<int>(state % 23) - 11) * ((state & 128) ? 1.0f : -1.0f);
    }
    double chunked = 0, flat = 0;
    for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
      double s = 0;
      for (int64_t i = c0; i < std::min(n, c0 + kChunk); ++i)
        s += static_cast<double>(g[static_cast<size_t>(i)]) * g[static_cast<size_t>(i)];
      chunked += s;
    }
    for (const float x : g)
      flat += static_cast<double>(x) * x;
    if (n > 2 * kChunk) {
      EXPECT_NE(chunked, flat) << "n " << n << ": the data cannot tell orders apart";
    }
    for (const int threads : {1, 2, 3}) {
      set_num_threads(threads);
      EXPECT_EQ(sum_squares(g.data(), n), chunked) << "n " << n << ", " << threads << " threads";
    }
  }
  set_num_threads(previous_threads);
}

}  // namespace
}  // namespace mt

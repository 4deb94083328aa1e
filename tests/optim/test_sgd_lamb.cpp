// SGD and LAMB (optim/optimizer.h) against double-precision references written
// from their definitions (torch.optim.SGD's documented algorithm; LAMB as in
// docs/MODEL.md), LAMB's trust ratio over a tensor split unevenly over three
// shards, and seed 004 §3's worked example through the parameter store.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <barrier>
#include <cmath>
#include <thread>
#include <vector>

#include "core/error.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim_bounds.h"
#include "parallel/local_store.h"

namespace mt {
namespace {

float grad_at(int64_t i, int t) {
  return std::sin(static_cast<float>(3 * i + t)) * (i % 4 == 0 ? 5.0f : 0.2f);
}

TEST(Sgd, MatchesTorchAlgorithmWithMomentumNesterovAndDecayRanges) {
  for (bool nesterov : {false, true}) {
    const int64_t n = 9;
    OptimizerOptions o;
    o.kind = OptimizerKind::sgd;
    o.adam.weight_decay = 0.05;
    o.momentum = 0.9;
    o.nesterov = nesterov;
    Optimizer opt(n, o, {{0, 3, false}, {3, 6, true}});
    ASSERT_EQ(opt.state_count(), 1);
    EXPECT_STREQ(opt.state_suffix(0), ".momentum_buffer");
    std::vector<float> p(n), g(n);
    std::vector<double> rp(n), buf(n, 0.0), dp(n, 0.0), dbuf(n, 0.0);
    for (int64_t i = 0; i < n; ++i)
      rp[i] = p[i] = 0.3f - 0.07f * static_cast<float>(i);
    for (int t = 1; t <= 6; ++t) {
      for (int64_t i = 0; i < n; ++i)
        g[i] = grad_at(i, t);
      const double lr = 0.02 * t;
      opt.step(p.data(), g.data(), lr);
      for (int64_t i = 0; i < n; ++i) {  // torch.optim.SGD, dampening 0
        // The fp32 errors, step by step (optim_bounds.h): d = g + λ·θ (λ's
        // rounding, the product, the sum), b = μ·b + d (μ's rounding, the
        // product, the sum; exactly d at step 1), Nesterov's d + μ·b likewise,
        // θ −= lr·d (lr's rounding, the product, the difference).
        const double u = testing::kU32, wd = i < 3 ? 0.0 : 0.05, mu = 0.9, e_wd = testing::f32_rel(wd);
        double d = g[i] + wd * rp[i];
        double dd = wd * dp[i] + (e_wd + u) * std::abs(wd * rp[i]) + u * std::abs(d);
        const double b_old = buf[i];
        buf[i] = t == 1 ? d : 0.9 * buf[i] + d;
        dbuf[i] = t == 1 ? dd
                         : mu * dbuf[i] + (testing::f32_rel(mu) + u) * mu * std::abs(b_old) + dd +
                               u * std::abs(buf[i]);
        if (nesterov) {
          dd = dd + mu * dbuf[i] + (testing::f32_rel(mu) + u) * mu * std::abs(buf[i]) +
               u * std::abs(d + 0.9 * buf[i]);
          d = d + 0.9 * buf[i];
        } else {
          d = buf[i];
          dd = dbuf[i];
        }
        rp[i] -= lr * d;
        dp[i] += lr * (dd + (testing::f32_rel(lr) + u) * std::abs(d)) + u * std::abs(rp[i]);
      }
    }
    for (int64_t i = 0; i < n; ++i)
      EXPECT_TRUE(testing::within_bound(p[i], rp[i], 1.01 * dp[i] + 1e-300, "sgd 6 steps"))
          << "element " << i << (nesterov ? " (nesterov)" : "");
  }
}

// LAMB in double for whole tensors [begin, end): the same order of operations.
// dp bounds the fp32 optimizer's error per element (optim_bounds.h): the
// direction r = dir + λ·θ off by δdir + λ·δθ + (λ's rounding + u)·|λθ| +
// u·|r|; the trust ratio √(Σθ²/Σr²) by Σ|θ|δθ/Σθ² + Σ|r|δr/Σr² relatively
// (first order) plus its double sums' rounding in any order over the shards
// (4·γ^double_n); θ −= fl(lr·trust)·r by lr·trust·(|r|·(δtrust + 2u) + δr)
// and u·|θ_new|.
struct LambRef {
  std::vector<double> p, m, v, dp = {};
  testing::AdamDirectionBound dir{0, 0.9, 0.99, 1e-6};
  void step(const std::vector<float>& g, const std::vector<std::pair<int64_t, int64_t>>& tensors,
            const std::vector<bool>& decay, double lr, int t) {
    const double u = testing::kU32;
    if (dp.empty()) {
      dp.assign(p.size(), 0.0);
      dir = testing::AdamDirectionBound(static_cast<int64_t>(p.size()), 0.9, 0.99, 1e-6);
    }
    std::vector<double> r(p.size()), dr(p.size());
    for (size_t i = 0; i < p.size(); ++i) {
      m[i] = 0.9 * m[i] + 0.1 * g[i];
      v[i] = 0.99 * v[i] + 0.01 * static_cast<double>(g[i]) * g[i];
      const double mh = m[i] / (1 - std::pow(0.9, t)), vh = v[i] / (1 - std::pow(0.99, t));
      const double wd = decay[i] ? 0.01 : 0.0;
      r[i] = mh / (std::sqrt(vh) + 1e-6) + wd * p[i];
      const auto [d, d_dir] = dir.step(i, g[i], t);
      dr[i] = d_dir + wd * dp[i] + (testing::f32_rel(wd) + u) * std::abs(wd * p[i]) + u * std::abs(r[i]);
    }
    for (const auto& [b, e] : tensors) {
      double ps = 0, rs = 0, pe = 0, re = 0;
      for (int64_t i = b; i < e; ++i) {
        ps += p[i] * p[i];
        rs += r[i] * r[i];
        pe += std::abs(p[i]) * dp[i];
        re += std::abs(r[i]) * dr[i];
      }
      const bool ratio = ps > 0 && rs > 0;
      const double trust = ratio ? std::sqrt(ps / rs) : 1.0;
      const double d_trust =
          ratio ? pe / ps + re / rs + 4 * testing::gamma_n(double(e - b), testing::kU64) : 0.0;
      for (int64_t i = b; i < e; ++i) {
        p[i] -= lr * trust * r[i];
        dp[i] += lr * trust * (std::abs(r[i]) * (d_trust + 2 * u) + dr[i]) + u * std::abs(p[i]);
      }
    }
  }
};

OptimizerOptions lamb_options() {
  OptimizerOptions o;
  o.kind = OptimizerKind::lamb;
  o.adam = {0.9, 0.99, 1e-6, 0.01};
  return o;
}

TEST(Lamb, MatchesDoubleReferencePerTensorWithAZeroTensor) {
  // Three tensors: [0, 5) norms-like (no decay), [5, 12) decayed, [12, 15)
  // all zeros (‖θ‖ = 0: trust ratio 1, a plain Adam step).
  const int64_t n = 15;
  std::vector<float> p(n, 0.0f), g(n);
  for (int64_t i = 0; i < 12; ++i)
    p[i] = 0.5f - 0.09f * static_cast<float>(i);
  LambRef ref{std::vector<double>(p.begin(), p.end()), std::vector<double>(n, 0.0),
              std::vector<double>(n, 0.0)};
  std::vector<bool> decay(n, false);
  for (int64_t i = 5; i < 12; ++i)
    decay[i] = true;
  Optimizer opt(n, lamb_options(), {{0, 5, false}, {5, 7, true}, {12, 3, false}},
                {{0, 5, 0, true}, {5, 7, 1, true}, {12, 3, 2, true}}, 3);
  for (int t = 1; t <= 4; ++t) {
    for (int64_t i = 0; i < n; ++i)
      g[i] = grad_at(i, t);
    ref.step(g, {{0, 5}, {5, 12}, {12, 15}}, decay, 0.01, t);
    opt.step(p.data(), g.data(), 0.01);
  }
  for (int64_t i = 0; i < n; ++i)
    EXPECT_TRUE(testing::within_bound(p[i], ref.p[i], 1.01 * ref.dp[i] + 1e-300, "lamb 4 steps"))
        << "element " << i;
  EXPECT_DOUBLE_EQ(lamb_trust_ratio(0.0, 4.0), 1.0);
  EXPECT_DOUBLE_EQ(lamb_trust_ratio(4.0, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(lamb_trust_ratio(9.0, 4.0), 1.5);
}

TEST(Lamb, TensorSplitUnevenlyOverThreeShardsEqualsTheUnsplitUpdate) {
  // Two tensors, A = [0, 11) and B = [11, 20), cut into three shards at 4 and
  // 13 (shard 1 holds the end of A and the start of B) plus one padding
  // element on shard 2; each shard's optimizer runs on its own thread and the
  // reducer sums the shards' per-tensor squares, as an all-reduce would.
  const int64_t n = 20;
  std::vector<float> full(n), g(n);
  for (int64_t i = 0; i < n; ++i)
    full[i] = 0.2f + 0.05f * static_cast<float>(i % 7) - (i >= 11 ? 0.4f : 0.0f);
  std::vector<float> whole = full;
  Optimizer one(n, lamb_options(), {{0, 11, true}, {11, 9, true}}, {{0, 11, 0, true}, {11, 9, 1, true}}, 2);
  struct Shard {
    int64_t begin, end;
    std::vector<TensorPiece> pieces;
  };
  const std::vector<Shard> shards = {{0, 4, {{0, 4, 0, true}}},
                                     {4, 13, {{0, 7, 0, true}, {7, 2, 1, true}}},
                                     {13, 20, {{0, 7, 1, true}, {7, 1, -1, false}}}};  // + padding
  std::vector<std::vector<float>> local(3), local_g(3);
  std::vector<std::unique_ptr<Optimizer>> opts;
  for (size_t r = 0; r < 3; ++r) {
    const Shard& s = shards[r];
    const int64_t len = s.end - s.begin + (r == 2 ? 1 : 0);
    local[r].assign(full.begin() + s.begin, full.begin() + s.end);
    if (r == 2) local[r].push_back(0.0f);
    opts.push_back(std::make_unique<Optimizer>(len, lamb_options(), std::vector<DecayRange>{{0, len, true}},
                                               s.pieces, 2));
  }
  std::vector<std::vector<double>> posted(3);
  std::barrier sync(3);
  // Both runs are within LambRef's bound of the exact update, so within twice
  // it of each other.
  LambRef ref{std::vector<double>(full.begin(), full.end()), std::vector<double>(n, 0.0),
              std::vector<double>(n, 0.0)};
  for (int t = 1; t <= 3; ++t) {
    for (int64_t i = 0; i < n; ++i)
      g[i] = grad_at(i, t);
    ref.step(g, {{0, 11}, {11, 20}}, std::vector<bool>(n, true), 0.02, t);
    std::vector<float> g_one = g;  // LAMB overwrites its gradients with the update
    one.step(whole.data(), g_one.data(), 0.02);
    std::vector<std::thread> threads;
    for (size_t r = 0; r < 3; ++r) {
      local_g[r].assign(g.begin() + shards[r].begin, g.begin() + shards[r].end);
      if (r == 2) local_g[r].push_back(0.0f);
      threads.emplace_back([&, r] {
        opts[r]->step(local[r].data(), local_g[r].data(), 0.02, [&](double* v, int64_t k) {
          posted[r].assign(v, v + k);
          sync.arrive_and_wait();
          for (int64_t j = 0; j < k; ++j)
            v[j] = posted[0][j] + posted[1][j] + posted[2][j];
          sync.arrive_and_wait();
        });
      });
    }
    for (auto& th : threads)
      th.join();
  }
  for (size_t r = 0; r < 3; ++r)
    for (int64_t i = shards[r].begin; i < shards[r].end; ++i)
      EXPECT_TRUE(testing::within_bound(local[r][i - shards[r].begin], whole[i],
                                        2 * 1.01 * ref.dp[i] + 1e-300, "lamb shards"))
          << "element " << i << " on shard " << r;
  EXPECT_FLOAT_EQ(local[2].back(), 0.0f);  // padding stays 0
  // Without the reducer each shard would use its own piece's ratio: different.
  Optimizer alone(4, lamb_options(), {{0, 4, true}}, {{0, 4, 0, true}}, 2);
  std::vector<float> a(full.begin(), full.begin() + 4), ga(g.begin(), g.begin() + 4);
  std::vector<float> w = full, gw = g;
  Optimizer one_more(n, lamb_options(), {{0, 11, true}, {11, 9, true}}, {{0, 11, 0, true}, {11, 9, 1, true}},
                     2);
  alone.step(a.data(), ga.data(), 0.02);
  one_more.step(w.data(), gw.data(), 0.02);
  EXPECT_GT(std::abs(a[0] - w[0]), 1e-5);  // not a rounding bound: 1e-5 is > 100 of one step's (≈ 1e-8)
}

TEST(Optimizer, Seed004LinearExampleThroughTheStoreAndSgd) {
  // Seed 004 §3: X = [[1, 2], [3, 4]], W = [[2], [-1]], Y = [[1], [3]];
  // L = 1/(2B) Σ (XW − Y)² with B = 2 gives L = 0.5 and G_W = Xᵀ(XW − Y)/B
  // = [[-2], [-3]]; SGD at lr 0.1, clipping off: W = [[2.2], [-0.7]].
  UnitSpec unit{"linear", 0, 2, {ParamSlot{"W", 0, 2, 1, true}}};
  LocalStore store({unit});
  store.local_params()[0] = 2.0f;
  store.local_params()[1] = -1.0f;
  const float X[2][2] = {{1, 2}, {3, 4}}, Y[2] = {1, 3};
  store.begin_step(1);
  store.begin_microbatch(0, 0);
  const float* W = store.acquire_params(0, Pass::forward);
  float* G = store.acquire_grads(0);
  double loss = 0;
  for (int b = 0; b < 2; ++b) {  // one sample at a time: each adds its term to G
    const float err = X[b][0] * W[0] + X[b][1] * W[1] - Y[b];
    loss += 0.25 * err * err;
    G[0] += X[b][0] * err / 2;
    G[1] += X[b][1] * err / 2;
  }
  store.release_grads(0);
  store.release_params(0, Pass::forward);
  store.finish_grads();
  EXPECT_DOUBLE_EQ(loss, 0.5);
  EXPECT_FLOAT_EQ(store.local_grads()[0], -2.0f);
  EXPECT_FLOAT_EQ(store.local_grads()[1], -3.0f);
  const double norm = std::sqrt(store.grad_sum_squares());
  EXPECT_DOUBLE_EQ(clip_by_norm(store.local_grads(), 2, norm, 0.0), 1.0);  // clipping off
  OptimizerOptions o;
  o.kind = OptimizerKind::sgd;
  o.adam.weight_decay = 0.0;
  Optimizer sgd(store.local_numel(), o, store.local_decay_ranges());
  sgd.step(store.local_params(), store.local_grads(), 0.1);
  store.after_update();
  EXPECT_FLOAT_EQ(store.local_params()[0], 2.2f);
  EXPECT_FLOAT_EQ(store.local_params()[1], -0.7f);
}

TEST(Optimizer, UnknownNameIsRefused) {
  EXPECT_EQ(parse_optimizer("lamb"), OptimizerKind::lamb);
  try {
    parse_optimizer("adam");
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("train.optimizer 'adam' must be adamw, sgd or lamb"));
  }
}

}  // namespace
}  // namespace mt

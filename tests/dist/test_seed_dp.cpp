// Seed 004 §5 on two real ranks: a linear model ŷ = x·W with the loss
// (1 / (2·B)) Σ (ŷ − y)² over the B samples of the GLOBAL batch, one sample per
// rank. Each rank computes its gradient with the global normalisation (divide
// by B, not by its own count) and the gradients are SUMMED over the dp group,
// which is how meshtrain's data parallelism works (data_parallel.h). The
// reduction here is the production one: a DataParallelStore over the two
// ranks, driven as the trainer drives it, at every ZeRO stage. The seed's other
// form, averaging each rank's local mean, agrees only while every rank has the
// same number of samples; the last test shows where it breaks. Expected values
// are derived by hand in the comments (docs/PARALLELISM.md, data parallelism).
//
// Weights are stored as meshtrain stores them, [out, in]: the seed's W = [[2], [-1]]
// (in × out) is the row [2, -1].
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bounds.h"
#include "comm/mpi_test.h"
#include "ops/gemm.h"
#include "parallel/data_parallel.h"
#include "parallel/shard.h"

namespace mt {
namespace {

using test::world;

constexpr int64_t kIn = 2, kOut = 1;
const std::vector<float> kW = {2.0f, -1.0f};  // [out = 1, in = 2]

// This rank's part of the loss; dW [out, in] += its gradient, through
// meshtrain's linear layer: dŷ = (ŷ − y) / norm, dW += dŷᵀ · x.
double local_grad(const std::vector<float>& X, const std::vector<float>& Y, double norm, const float* W,
                  float* dW) {
  const int64_t N = static_cast<int64_t>(Y.size());
  std::vector<float> yhat(static_cast<size_t>(N * kOut));
  linear_forward(yhat.data(), X.data(), W, N, kIn, kOut);
  std::vector<float> dy(yhat.size());
  double loss = 0;
  for (size_t i = 0; i < yhat.size(); ++i) {
    const double r = static_cast<double>(yhat[i]) - Y[i];
    dy[i] = static_cast<float>(r / norm);
    loss += r * r / (2 * norm);
  }
  linear_backward(nullptr, dW, dy.data(), X.data(), W, N, kIn, kOut);
  return loss;
}

// The model as the store sees it: one unit holding the one parameter W.
std::vector<UnitSpec> linear_units() {
  ParamSlot w;
  w.name = "W";
  w.rows = kOut;
  w.row_size = kIn;
  UnitSpec u;
  u.name = "linear";
  u.end = kOut * kIn;
  u.params = {w};
  return {u};
}

struct Reduced {
  std::vector<float> dW;   // the reduced gradient, assembled from the ranks' shares
  double sum_squares = 0;  // the store's grad_sum_squares()
  double loss = 0;         // summed over the ranks
};

// One training step's gradient through a DataParallelStore over the world, in
// the trainer's order: begin_step, begin_microbatch, forward, backward into
// the store's buffer, finish_grads. Under ZeRO 1-3 each rank holds a row shard
// of the gradient; they are all-gathered and unpacked to compare the whole.
Reduced reduce_through_store(int zero, const std::vector<float>& X, const std::vector<float>& Y,
                             double norm) {
  const std::vector<UnitSpec> units = linear_units();
  DataParallelStore store(units, world(), DataParallelOptions{zero, 25 << 20});
  store.scatter_full_params(kW.data());
  store.begin_step(1);
  store.begin_microbatch(0, 0);
  store.acquire_params(0, Pass::forward);
  store.release_params(0, Pass::forward);
  const float* W = store.acquire_params(0, Pass::backward);
  Reduced r;
  r.loss = local_grad(X, Y, norm, W, store.acquire_grads(0));
  store.release_grads(0);
  store.release_params(0, Pass::backward);
  store.finish_grads();
  r.sum_squares = store.grad_sum_squares();
  world().all_reduce(&r.loss, 1, "seed 004 loss");
  r.dW.assign(static_cast<size_t>(kOut * kIn), 0.0f);
  if (zero == 0) {
    std::copy(store.local_grads(), store.local_grads() + kOut * kIn, r.dW.begin());
  } else {
    const UnitShards shards(units[0], world().size());
    std::vector<float> packed(static_cast<size_t>(world().size() * shards.shard_numel()));
    world().all_gather(store.local_grads(), packed.data(), shards.shard_numel(), ElemType::f32,
                       "seed 004 gradient shards");
    shards.unpack(packed.data(), r.dW.data());
  }
  return r;
}

class Seed004 : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    if (world().size() != 2)
      GTEST_SKIP() << "the data-parallel worked example has two ranks (this job has " << world().size()
                   << ")";
  }
  int zero() const { return GetParam(); }
};

// X = [[1, 2], [3, 4]], Y = [[1], [3]]: ŷ = [0, 2], residuals [-1, -1],
// G_W = Xᵀ·r / 2 = [[-4], [-6]] / 2 = [[-2], [-3]]; loss = (1 + 1) / 4 = 0.5.
TEST_P(Seed004, GlobalNormalisedSumIsTheGlobalGradient) {
  const int r = world().rank();
  const std::vector<float> X = r == 0 ? std::vector<float>{1, 2} : std::vector<float>{3, 4};
  const std::vector<float> Y = r == 0 ? std::vector<float>{1} : std::vector<float>{3};
  int64_t count = static_cast<int64_t>(Y.size());
  world().all_reduce(&count, 1, "seed 004 sample count");
  EXPECT_EQ(count, 2);

  // Local, globally normalised: rank 0 [[-1], [-2]] / 2, rank 1 [[-3], [-4]] / 2.
  std::vector<float> local(2, 0.0f);
  local_grad(X, Y, static_cast<double>(count), kW.data(), local.data());
  EXPECT_EQ(local, r == 0 ? (std::vector<float>{-0.5f, -1.0f}) : (std::vector<float>{-1.5f, -2.0f}));

  const Reduced g = reduce_through_store(zero(), X, Y, static_cast<double>(count));
  EXPECT_EQ(g.dW, (std::vector<float>{-2.0f, -3.0f}));  // exact: every value is a dyadic
  EXPECT_EQ(g.sum_squares, 13.0);                       // (-2)² + (-3)², each element once
  EXPECT_EQ(g.loss, 0.5);
}

// The seed's averaging form: each rank's local mean gradient (divide by its own
// count, 1), summed by the store and divided by the 2 ranks. Equal counts: the
// same answer.
TEST_P(Seed004, AveragedLocalMeansAgreeWhenCountsAreEqual) {
  const int r = world().rank();
  const std::vector<float> X = r == 0 ? std::vector<float>{1, 2} : std::vector<float>{3, 4};
  const std::vector<float> Y = r == 0 ? std::vector<float>{1} : std::vector<float>{3};
  std::vector<float> local(2, 0.0f);
  local_grad(X, Y, static_cast<double>(Y.size()), kW.data(), local.data());
  EXPECT_EQ(local, r == 0 ? (std::vector<float>{-1.0f, -2.0f}) : (std::vector<float>{-3.0f, -4.0f}));
  std::vector<float> mean = reduce_through_store(zero(), X, Y, static_cast<double>(Y.size())).dW;
  for (float& v : mean)
    v /= static_cast<float>(world().size());
  EXPECT_EQ(mean, (std::vector<float>{-2.0f, -3.0f}));
}

// Unequal counts: rank 0 has [1, 2] → 1, rank 1 has [3, 4] → 3 and [5, 6] → 2.
// ŷ = [0, 2, 4], residuals [-1, -1, 2], B = 3:
//   G_W = (1·-1 + 3·-1 + 5·2, 2·-1 + 4·-1 + 6·2) / 3 = (6, 6) / 3 = (2, 2); loss = (1 + 1 + 4) / 6 = 1.
// Averaging local means gives ((-1, -2) + (7, 8) / 2) / 2 = (1.25, 1): wrong.
TEST_P(Seed004, UnequalCountsNeedTheGlobalNormalisation) {
  const int r = world().rank();
  const std::vector<float> X = r == 0 ? std::vector<float>{1, 2} : std::vector<float>{3, 4, 5, 6};
  const std::vector<float> Y = r == 0 ? std::vector<float>{1} : std::vector<float>{3, 2};
  int64_t count = static_cast<int64_t>(Y.size());
  world().all_reduce(&count, 1, "seed 004 sample count");
  EXPECT_EQ(count, 3);

  // One process with all three samples, computed here.
  std::vector<float> one(2, 0.0f);
  // Bounds: ŷ and the residuals are exact (small integers); dŷ = fl(r/3)
  // rounds once, each product dŷ·x once, and G_W sums 3 terms (on one rank or
  // over two): γ_5 · Σ|r·x|/3 = γ_5 · (14/3, 6). The loss sums 3 exact-input
  // terms r²/6 in double (and over ranks): γ^double_5 · 1.
  const double b_dw[2] = {testing::gamma_n(5) * 14.0 / 3.0, testing::gamma_n(5) * 6.0};
  const double b_loss = testing::gamma_n(5, testing::kU64);
  EXPECT_TRUE(testing::within_bound(local_grad({1, 2, 3, 4, 5, 6}, {1, 3, 2}, 3.0, kW.data(), one.data()),
                                    1.0, b_loss, "loss, one process"));
  EXPECT_TRUE(testing::within_bound(one[0], 2.0, b_dw[0], "dW0, one process"));
  EXPECT_TRUE(testing::within_bound(one[1], 2.0, b_dw[1], "dW1, one process"));

  const Reduced g = reduce_through_store(zero(), X, Y, static_cast<double>(count));
  for (size_t i = 0; i < g.dW.size(); ++i) {
    EXPECT_TRUE(testing::within_bound(g.dW[i], 2.0, b_dw[i], "dW, dp 2")) << i;
    EXPECT_TRUE(testing::within_bound(g.dW[i], one[i], 2 * b_dw[i], "dW, dp 2 vs one"))
        << i;  // both within b
  }
  // Σ dW² in double of the fp32 dW: |Σ dW² − 8| ≤ Σ (2·2 + b)·b + the double sum's rounding.
  EXPECT_TRUE(testing::within_bound(
      g.sum_squares, 8.0,
      (4 + b_dw[0]) * b_dw[0] + (4 + b_dw[1]) * b_dw[1] + 8 * testing::gamma_n(2, testing::kU64),
      "sum of squares"));
  EXPECT_TRUE(testing::within_bound(g.loss, 1.0, b_loss, "loss, dp 2"));

  std::vector<float> averaged = reduce_through_store(zero(), X, Y, static_cast<double>(Y.size())).dW;
  for (float& v : averaged)
    v /= static_cast<float>(world().size());
  // Norms 1 and 2: every residual, quotient and sum here is a dyadic: exact.
  EXPECT_EQ(averaged[0], 1.25f);
  EXPECT_EQ(averaged[1], 1.0f);
  EXPECT_GT(std::abs(averaged[0] - one[0]) + std::abs(averaged[1] - one[1]), 0.5f)
      << "averaging local means should differ from the global gradient when counts differ";
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, Seed004, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return "zero" + std::to_string(param_info.param);
                         });

}  // namespace
}  // namespace mt

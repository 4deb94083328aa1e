// Seed 004 §5 on two real ranks: a linear model ŷ = x·W with the loss
// (1 / (2·B)) Σ (ŷ − y)² over the B samples of the GLOBAL batch, one sample per
// rank. Each rank computes its gradient with the global normalisation (divide
// by B, not by its own count) and the gradients are SUMMED over the dp group,
// which is how meshtrain's data parallelism works (data_parallel.h). The seed's
// other form, averaging each rank's local mean, agrees only while every rank
// has the same number of samples; the last test shows where it breaks.
//
// Weights are stored as meshtrain stores them, [out, in]: the seed's W = [[2], [-1]]
// (in × out) is the row [2, -1].
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "comm/mpi_test.h"
#include "ops/gemm.h"

namespace mt {
namespace {

using test::world;

constexpr int64_t kIn = 2, kOut = 1;
const std::vector<float> kW = {2.0f, -1.0f};  // [out = 1, in = 2]

struct Grad {
  std::vector<float> dW;  // [out, in]
  double loss = 0;        // this rank's part of the loss
};

// Gradient of (1 / (2·norm)) Σ_rows (x·W − y)² over the given rows, through
// meshtrain's linear layer: dŷ = (ŷ − y) / norm, dW += dŷᵀ · x.
Grad local_grad(const std::vector<float>& X, const std::vector<float>& Y, double norm) {
  const int64_t N = static_cast<int64_t>(Y.size());
  std::vector<float> yhat(static_cast<size_t>(N * kOut));
  linear_forward(yhat.data(), X.data(), kW.data(), N, kIn, kOut);
  std::vector<float> dy(yhat.size());
  Grad g;
  g.dW.assign(static_cast<size_t>(kOut * kIn), 0.0f);
  for (size_t i = 0; i < yhat.size(); ++i) {
    const double r = static_cast<double>(yhat[i]) - Y[i];
    dy[i] = static_cast<float>(r / norm);
    g.loss += r * r / (2 * norm);
  }
  linear_backward(nullptr, g.dW.data(), dy.data(), X.data(), kW.data(), N, kIn, kOut);
  return g;
}

std::vector<float> sum_over_ranks(std::vector<float> v) {
  world().all_reduce(v.data(), static_cast<int64_t>(v.size()), "seed 004 gradient");
  return v;
}

class Seed004 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world().size() != 2)
      GTEST_SKIP() << "seed 004 §5 has two ranks (this job has " << world().size() << ")";
  }
};

// X = [[1, 2], [3, 4]], Y = [[1], [3]]: ŷ = [0, 2], residuals [-1, -1],
// G_W = Xᵀ·r / 2 = [[-4], [-6]] / 2 = [[-2], [-3]]; loss = (1 + 1) / 4 = 0.5.
TEST_F(Seed004, GlobalNormalisedSumIsTheGlobalGradient) {
  const int r = world().rank();
  const std::vector<float> X = r == 0 ? std::vector<float>{1, 2} : std::vector<float>{3, 4};
  const std::vector<float> Y = r == 0 ? std::vector<float>{1} : std::vector<float>{3};
  int64_t count = static_cast<int64_t>(Y.size());
  world().all_reduce(&count, 1, "seed 004 sample count");
  EXPECT_EQ(count, 2);

  const Grad g = local_grad(X, Y, static_cast<double>(count));
  // Local, globally normalised: rank 0 [[-1], [-2]] / 2, rank 1 [[-3], [-4]] / 2.
  const std::vector<float> want_local =
      r == 0 ? std::vector<float>{-0.5f, -1.0f} : std::vector<float>{-1.5f, -2.0f};
  EXPECT_EQ(g.dW, want_local);

  EXPECT_EQ(sum_over_ranks(g.dW), (std::vector<float>{-2.0f, -3.0f}));  // exact: every value is a dyadic
  double loss = g.loss;
  world().all_reduce(&loss, 1, "seed 004 loss");
  EXPECT_EQ(loss, 0.5);
}

// The seed's averaging form: each rank's local mean gradient (divide by its own
// count, 1), averaged over the 2 ranks. Equal counts: the same answer.
TEST_F(Seed004, AveragedLocalMeansAgreeWhenCountsAreEqual) {
  const int r = world().rank();
  const std::vector<float> X = r == 0 ? std::vector<float>{1, 2} : std::vector<float>{3, 4};
  const std::vector<float> Y = r == 0 ? std::vector<float>{1} : std::vector<float>{3};
  const Grad g = local_grad(X, Y, static_cast<double>(Y.size()));
  EXPECT_EQ(g.dW, r == 0 ? (std::vector<float>{-1.0f, -2.0f}) : (std::vector<float>{-3.0f, -4.0f}));
  std::vector<float> mean = sum_over_ranks(g.dW);
  for (float& v : mean)
    v /= static_cast<float>(world().size());
  EXPECT_EQ(mean, (std::vector<float>{-2.0f, -3.0f}));
}

// Unequal counts: rank 0 has [1, 2] → 1, rank 1 has [3, 4] → 3 and [5, 6] → 2.
// ŷ = [0, 2, 4], residuals [-1, -1, 2], B = 3:
//   G_W = (1·-1 + 3·-1 + 5·2, 2·-1 + 4·-1 + 6·2) / 3 = (6, 6) / 3 = (2, 2); loss = (1 + 1 + 4) / 6 = 1.
// Averaging local means gives ((-1, -2) + (7, 8) / 2) / 2 = (1.25, 1): wrong.
TEST_F(Seed004, UnequalCountsNeedTheGlobalNormalisation) {
  const int r = world().rank();
  const std::vector<float> X = r == 0 ? std::vector<float>{1, 2} : std::vector<float>{3, 4, 5, 6};
  const std::vector<float> Y = r == 0 ? std::vector<float>{1} : std::vector<float>{3, 2};
  int64_t count = static_cast<int64_t>(Y.size());
  world().all_reduce(&count, 1, "seed 004 sample count");
  EXPECT_EQ(count, 3);

  // One process with all three samples, computed here.
  const Grad one = local_grad({1, 2, 3, 4, 5, 6}, {1, 3, 2}, 3.0);
  EXPECT_NEAR(one.dW[0], 2.0f, 1e-6);
  EXPECT_NEAR(one.dW[1], 2.0f, 1e-6);
  EXPECT_NEAR(one.loss, 1.0, 1e-12);

  const Grad g = local_grad(X, Y, static_cast<double>(count));
  const std::vector<float> summed = sum_over_ranks(g.dW);
  double loss = g.loss;
  world().all_reduce(&loss, 1, "seed 004 loss");
  for (size_t i = 0; i < summed.size(); ++i) {
    EXPECT_NEAR(summed[i], 2.0f, 1e-6) << i;
    EXPECT_NEAR(summed[i], one.dW[i], 1e-6) << i;
  }
  EXPECT_NEAR(loss, 1.0, 1e-12);

  const Grad local_mean = local_grad(X, Y, static_cast<double>(Y.size()));
  std::vector<float> averaged = sum_over_ranks(local_mean.dW);
  for (float& v : averaged)
    v /= static_cast<float>(world().size());
  EXPECT_NEAR(averaged[0], 1.25f, 1e-6);
  EXPECT_NEAR(averaged[1], 1.0f, 1e-6);
  EXPECT_GT(std::abs(averaged[0] - one.dW[0]) + std::abs(averaged[1] - one.dW[1]), 0.5f)
      << "averaging local means should differ from the global gradient when counts differ";
}

}  // namespace
}  // namespace mt

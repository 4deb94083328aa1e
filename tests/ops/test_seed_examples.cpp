// Golden values from the worked examples in the user's seeds (hand-computed
// there, hard-coded here). The seeds write weights [in, out]; ours are stored
// [out, in] like PyTorch, so every W below is the transpose of the seed's.
#include <gtest/gtest.h>

#include <vector>

#include "ops/gemm.h"

namespace mt {
namespace {

// Columns [c0, c1) of a row-major [rows, cols] matrix, as a contiguous matrix.
std::vector<float> columns(const std::vector<float>& m, int64_t rows, int64_t cols, int64_t c0, int64_t c1) {
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = c0; c < c1; ++c)
      out.push_back(m[r * cols + c]);
  }
  return out;
}

// Seed 003 §03–05: column-parallel W1, local ReLU, row-parallel W2 on two cards.
TEST(SeedExamples, Seed003ColumnThenRowParallelMlp) {
  const std::vector<float> X = {1, 2};
  // Seed W1 (in × out) = [[1,2,0,1],[0,1,3,2]]; ours [out=4, in=2].
  const std::vector<float> W1 = {1, 0, 2, 1, 0, 3, 1, 2};
  // Seed W2 (in × out) = [[1,0],[0,1],[1,1],[2,0]]; ours [out=2, in=4].
  const std::vector<float> W2 = {1, 0, 1, 2, 0, 1, 1, 0};

  // §03: full XW1 and the two output-column shards (rows of our W1).
  std::vector<float> XW1(4);
  linear_forward(XW1.data(), X.data(), W1.data(), 1, 2, 4);
  EXPECT_EQ(XW1, (std::vector<float>{1, 4, 6, 5}));
  std::vector<float> card0(2), card1(2);
  linear_forward(card0.data(), X.data(), W1.data(), 1, 2, 2);
  linear_forward(card1.data(), X.data(), W1.data() + 2 * 2, 1, 2, 2);
  EXPECT_EQ(card0, (std::vector<float>{1, 4}));
  EXPECT_EQ(card1, (std::vector<float>{6, 5}));

  // §04: H = ReLU(XW1) stays sharded; each card multiplies its slice of H by
  // its input-rows of the seed's W2 (input columns of ours); partials sum.
  std::vector<float> H = XW1;
  for (float& h : H)
    h = h > 0 ? h : 0;
  EXPECT_EQ(H, (std::vector<float>{1, 4, 6, 5}));
  const auto W2_card0 = columns(W2, 2, 4, 0, 2);
  const auto W2_card1 = columns(W2, 2, 4, 2, 4);
  std::vector<float> Y0(2), Y1(2);
  linear_forward(Y0.data(), H.data(), W2_card0.data(), 1, 2, 2);
  linear_forward(Y1.data(), H.data() + 2, W2_card1.data(), 1, 2, 2);
  EXPECT_EQ(Y0, (std::vector<float>{1, 4}));
  EXPECT_EQ(Y1, (std::vector<float>{16, 6}));
  std::vector<float> Y = Y0;  // the partial sum, as Out::add accumulates it
  linear_forward(Y.data(), H.data() + 2, W2_card1.data(), 1, 2, 2, Out::add);
  EXPECT_EQ(Y, (std::vector<float>{17, 10}));
  std::vector<float> Y_full(2);
  linear_forward(Y_full.data(), H.data(), W2.data(), 1, 4, 2);
  EXPECT_EQ(Y_full, (std::vector<float>{17, 10}));

  // §05: backward with dY = [2, −1].
  const std::vector<float> dY = {2, -1};
  std::vector<float> dH(4), dW2(8, 0.0f);
  linear_backward(dH.data(), dW2.data(), dY.data(), H.data(), W2.data(), 1, 4, 2);
  EXPECT_EQ(dH, (std::vector<float>{2, -1, 1, 4}));
  std::vector<float> dH0(2), dH1(2);
  linear_backward(dH0.data(), nullptr, dY.data(), H.data(), W2_card0.data(), 1, 2, 2);
  linear_backward(dH1.data(), nullptr, dY.data(), H.data() + 2, W2_card1.data(), 1, 2, 2);
  EXPECT_EQ(dH0, (std::vector<float>{2, -1}));
  EXPECT_EQ(dH1, (std::vector<float>{1, 4}));
  // ReLU passes the gradient through: every pre-activation is positive.
  std::vector<float> dX0(2), dX1(2), dX(2), dW1(8, 0.0f);
  linear_backward(dX0.data(), nullptr, dH0.data(), X.data(), W1.data(), 1, 2, 2);
  linear_backward(dX1.data(), nullptr, dH1.data(), X.data(), W1.data() + 4, 1, 2, 2);
  EXPECT_EQ(dX0, (std::vector<float>{0, -1}));
  EXPECT_EQ(dX1, (std::vector<float>{4, 11}));
  EXPECT_EQ((std::vector<float>{dX0[0] + dX1[0], dX0[1] + dX1[1]}), (std::vector<float>{4, 10}));
  linear_backward(dX.data(), dW1.data(), dH.data(), X.data(), W1.data(), 1, 2, 4);
  EXPECT_EQ(dX, (std::vector<float>{4, 10}));

  // Weight gradients belong to the shards: each card's dW is its slice of the full one.
  std::vector<float> dW1_card1(4, 0.0f), dW2_card0(4, 0.0f);
  linear_backward(nullptr, dW1_card1.data(), dH1.data(), X.data(), W1.data() + 4, 1, 2, 2);
  linear_backward(nullptr, dW2_card0.data(), dY.data(), H.data(), W2_card0.data(), 1, 2, 2);
  EXPECT_EQ(dW1_card1, std::vector<float>(dW1.begin() + 4, dW1.end()));
  EXPECT_EQ(dW2_card0, columns(dW2, 2, 4, 0, 2));
}

// Seed 004 §3: one linear layer, mean-squared-error loss, one SGD step.
TEST(SeedExamples, Seed004BatchGradientAndSgdStep) {
  const std::vector<float> X = {1, 2, 3, 4};  // B = 2 samples, 2 features
  std::vector<float> W = {2, -1};             // seed W (in × out) = [[2],[-1]]; ours [1, 2]
  const std::vector<float> Y = {1, 3};
  const int64_t B = 2;

  std::vector<float> Yhat(2);
  linear_forward(Yhat.data(), X.data(), W.data(), B, 2, 1);
  EXPECT_EQ(Yhat, (std::vector<float>{0, 2}));

  // loss = 1/(2B) Σ (Ŷ − Y)², so dŶ = (Ŷ − Y) / B.
  float loss = 0;
  std::vector<float> dYhat(2);
  for (int64_t b = 0; b < B; ++b) {
    loss += (Yhat[b] - Y[b]) * (Yhat[b] - Y[b]) / (2 * B);
    dYhat[b] = (Yhat[b] - Y[b]) / B;
  }
  EXPECT_EQ(loss, 0.5f);
  EXPECT_EQ(dYhat, (std::vector<float>{-0.5f, -0.5f}));

  std::vector<float> GW(2, 0.0f);
  linear_backward(nullptr, GW.data(), dYhat.data(), X.data(), W.data(), B, 2, 1);
  EXPECT_EQ(GW, (std::vector<float>{-2, -3}));

  // Per-sample contributions, and their sum through the accumulate contract.
  std::vector<float> g0(2, 0.0f), g1(2, 0.0f), acc(2, 0.0f);
  linear_backward(nullptr, g0.data(), dYhat.data(), X.data(), W.data(), 1, 2, 1);
  linear_backward(nullptr, g1.data(), dYhat.data() + 1, X.data() + 2, W.data(), 1, 2, 1);
  EXPECT_EQ(g0, (std::vector<float>{-0.5f, -1.0f}));
  EXPECT_EQ(g1, (std::vector<float>{-1.5f, -2.0f}));
  linear_backward(nullptr, acc.data(), dYhat.data(), X.data(), W.data(), 1, 2, 1);
  linear_backward(nullptr, acc.data(), dYhat.data() + 1, X.data() + 2, W.data(), 1, 2, 1);
  EXPECT_EQ(acc, GW);

  for (size_t i = 0; i < W.size(); ++i)
    W[i] -= 0.1f * GW[i];
  EXPECT_FLOAT_EQ(W[0], 2.2f);
  EXPECT_FLOAT_EQ(W[1], -0.7f);
}

// Seed 004 §6: a column-split layer on two cards; input-gradient contributions sum.
TEST(SeedExamples, Seed004ColumnSplitGradients) {
  const std::vector<float> x = {1, 2};
  const std::vector<float> W = {1, 2, 3, 4};  // seed W (in × out) = [[1,3],[2,4]]; ours [2, 2]
  std::vector<float> y(2), y0(1), y1(1);
  linear_forward(y.data(), x.data(), W.data(), 1, 2, 2);
  linear_forward(y0.data(), x.data(), W.data(), 1, 2, 1);
  linear_forward(y1.data(), x.data(), W.data() + 2, 1, 2, 1);
  EXPECT_EQ(y, (std::vector<float>{5, 11}));
  EXPECT_EQ(y0, (std::vector<float>{5}));
  EXPECT_EQ(y1, (std::vector<float>{11}));

  const std::vector<float> Gy = {1, 2};
  std::vector<float> Gx0(2), Gx1(2), GW0(2, 0.0f), GW1(2, 0.0f);
  linear_backward(Gx0.data(), GW0.data(), Gy.data(), x.data(), W.data(), 1, 2, 1);
  linear_backward(Gx1.data(), GW1.data(), Gy.data() + 1, x.data(), W.data() + 2, 1, 2, 1);
  EXPECT_EQ(GW0, (std::vector<float>{1, 2}));  // seed G_W0 = [[1],[2]]
  EXPECT_EQ(GW1, (std::vector<float>{2, 4}));  // seed G_W1 = [[2],[4]]
  EXPECT_EQ(Gx0, (std::vector<float>{1, 2}));
  EXPECT_EQ(Gx1, (std::vector<float>{6, 8}));
  std::vector<float> Gx(2);
  linear_backward(Gx.data(), nullptr, Gy.data(), x.data(), W.data(), 1, 2, 2);
  EXPECT_EQ(Gx, (std::vector<float>{7, 10}));
}

}  // namespace
}  // namespace mt

// The seeds' worked examples of tensor parallelism on tp = 2 (dp = world / 2),
// computed with the column- and row-parallel functions and checked against the
// numbers written in the seeds. The seeds write W as [in, out] (y = x·W);
// meshtrain stores [out, in], so each W below is the seed's transposed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "comm/mpi_test.h"
#include "ops/gemm.h"
#include "ops/reference.h"
#include "ops/swiglu.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp_plan.h"
#include "tp_test_util.h"

namespace mt {
namespace {

using test::block;
using test::rel_err;
using test::to_double;
using V = std::vector<float>;

class TpSeed : public ::testing::Test {
 protected:
  void SetUp() override {
    if (test::world().size() % 2 != 0) GTEST_SKIP() << "the seeds' examples run on tp = 2";
  }
};

// Seed 003 §03–05: X = [1, 2]; W1 (seed [2, 4]) column-parallel, ReLU, W2 (seed
// [4, 2]) row-parallel; dY = [2, −1].
TEST_F(TpSeed, Seed003ColumnReluRow) {
  DeviceMesh mesh = test::tp_mesh(2);
  Group g = mesh.group("tp");
  const int t = g.rank();
  const V X = {1, 2};
  const V W1 = {1, 0, 2, 1, 0, 3, 1, 2};  // [out 4, in 2]
  const V W2 = {1, 0, 1, 2, 0, 1, 1, 0};  // [out 2, in 4]
  const V w1 = block(W1, 2, 2 * t, 2, 0, 2), w2 = block(W2, 4, 0, 2, 2 * t, 2);
  const tp::TpLayer up{&g, "seed003 W1"}, down{&g, "seed003 W2"};

  // §03: card 0 → [1, 4], card 1 → [6, 5] (to be concatenated, not added).
  V h(2);
  tp::column_parallel_forward(h.data(), nullptr, X.data(), w1.data(), 1, 2, 2, up);
  EXPECT_EQ(h, t == 0 ? (V{1, 4}) : (V{6, 5}));
  for (float& v : h)
    v = std::max(v, 0.0f);
  // §04: contributions [1, 4] and [16, 6], summed to [17, 10].
  V contribution(2), y(2);
  linear_forward(contribution.data(), h.data(), w2.data(), 1, 2, 2);
  EXPECT_EQ(contribution, t == 0 ? (V{1, 4}) : (V{16, 6}));
  tp::row_parallel_forward(y.data(), test::scratch(), h.data(), w2.data(), 1, 2, 2, down);
  EXPECT_EQ(y, (V{17, 10}));

  // §05: dH = [2, −1, 1, 4] by channel; dX contributions [0, −1] and [4, 11] → [4, 10].
  const V dY = {2, -1};
  V dh(2), dw2(4, 0.0f), dw1(4, 0.0f), dx_own(2), dx(2);
  tp::row_parallel_backward(dh.data(), dw2.data(), test::scratch(), dY.data(), h.data(), w2.data(), 1, 2, 2,
                            down);
  EXPECT_EQ(dh, t == 0 ? (V{2, -1}) : (V{1, 4}));
  for (size_t i = 0; i < 2; ++i)
    dh[i] = h[i] > 0 ? dh[i] : 0.0f;
  linear_backward(dx_own.data(), nullptr, dh.data(), X.data(), w1.data(), 1, 2, 2);
  EXPECT_EQ(dx_own, t == 0 ? (V{0, -1}) : (V{4, 11}));
  tp::column_parallel_backward(dx.data(), dw1.data(), test::scratch(), dh.data(), X.data(), w1.data(), 1, 2,
                               2, up);
  EXPECT_EQ(dx, (V{4, 10}));
  // Weight gradients belong to the shards: dW1[o, :] = dH[o]·X, dW2[:, i] = dYᵀ·H[i].
  EXPECT_EQ(dw1, t == 0 ? (V{2, 4, -1, -2}) : (V{1, 2, 4, 8}));
  EXPECT_EQ(dw2, t == 0 ? (V{2, 8, -1, -4}) : (V{12, 10, -6, -5}));
}

// Seed 004 §6: x = [1, 2], W = [[1, 3], [2, 4]] (seed [in, out]), G_y = [1, 2].
TEST_F(TpSeed, Seed004InputGradientIsASum) {
  DeviceMesh mesh = test::tp_mesh(2);
  Group g = mesh.group("tp");
  const int t = g.rank();
  const V x = {1, 2};
  const V W = {1, 2, 3, 4};  // [out 2, in 2]
  const V Gy = {1, 2};

  // Column split: rank 0 W0 = [[1], [2]] → y0 = 5; rank 1 W1 = [[3], [4]] → y1 = 11.
  const V w = block(W, 2, t, 1, 0, 2);
  const tp::TpLayer col{&g, "seed004 column"}, row{&g, "seed004 row"};
  V y(1), gw(2, 0.0f), gx_own(2), gx(2);
  tp::column_parallel_forward(y.data(), nullptr, x.data(), w.data(), 1, 2, 1, col);
  EXPECT_EQ(y, t == 0 ? V{5} : V{11});
  const V gy = {Gy[static_cast<size_t>(t)]};
  linear_backward(gx_own.data(), nullptr, gy.data(), x.data(), w.data(), 1, 2, 1);
  EXPECT_EQ(gx_own, t == 0 ? (V{1, 2}) : (V{6, 8}));  // G_x^(0), G_x^(1)
  tp::column_parallel_backward(gx.data(), gw.data(), test::scratch(), gy.data(), x.data(), w.data(), 1, 2, 1,
                               col);
  EXPECT_EQ(gx, (V{7, 10}));                      // a SUM, not a mean
  EXPECT_EQ(gw, t == 0 ? (V{1, 2}) : (V{2, 4}));  // G_W0 = xᵀ·1, G_W1 = xᵀ·2: per shard

  // Row split: y = x0·W0 + x1·W1 = [5, 11] after the sum; G_x stays sharded: [7] | [10].
  const V wr = block(W, 2, 0, 2, t, 1), xr = {x[static_cast<size_t>(t)]};
  V yr(2), gxr(1), gwr(2, 0.0f);
  tp::row_parallel_forward(yr.data(), test::scratch(), xr.data(), wr.data(), 1, 1, 2, row);
  EXPECT_EQ(yr, (V{5, 11}));
  tp::row_parallel_backward(gxr.data(), gwr.data(), test::scratch(), Gy.data(), xr.data(), wr.data(), 1, 1, 2,
                            row);
  EXPECT_EQ(gxr, t == 0 ? V{7} : V{10});
}

// Seed 000: SwiGLU FFN, dim 4, hidden 8, tp = 2 (× dp = world / 2, each replica
// its own token, §4.4). w1, w3 [8, 4] column-parallel → [4, 4] per rank, fused
// as one [w1_t; w3_t] GEMM; w2 [4, 8] row-parallel → [4, 4]. Forward: ONE
// all-reduce of Y [1, 4] over tp (§4.3.3). Backward: ONE all-reduce of dX [1, 4]
// over tp and none of w2's gradient: the seed's table (§6, "反向-w2梯度
// All-Reduce") is wrong there, the tp ranks hold different w2 shards.
TEST_F(TpSeed, Seed000SwiGluFfnLedger) {
  DeviceMesh mesh = test::tp_mesh(2);
  Group g = mesh.group("tp");
  const int t = g.rank();
  constexpr int64_t D = 4, H = 8, Hl = 4;
  const uint32_t replica = static_cast<uint32_t>(mesh.coord("dp"));
  const V W13 = test::random_vec(2 * H * D, 11);  // [w1; w3], [16, 4]
  const V W2 = test::random_vec(D * H, 12);
  const V X = test::random_vec(D, 100 + replica), dY = test::random_vec(D, 200 + replica);
  // One process, double.
  std::vector<double> gu(2 * H), z(H), Y(D), dz(H), dgu(2 * H), dX(D), dW13(2 * H * D, 0.0), dW2(D * H, 0.0);
  ref::linear_forward(gu.data(), to_double(X).data(), to_double(W13).data(), 1, D, 2 * H);
  ref::swiglu_forward(z.data(), gu.data(), 1, H);
  ref::linear_forward(Y.data(), z.data(), to_double(W2).data(), 1, H, D);
  ref::linear_backward(dz.data(), dW2.data(), to_double(dY).data(), z.data(), to_double(W2).data(), 1, H, D);
  ref::swiglu_backward(dgu.data(), dz.data(), gu.data(), 1, H);
  ref::linear_backward(dX.data(), dW13.data(), dgu.data(), to_double(X).data(), to_double(W13).data(), 1, D,
                       2 * H);

  const V w13 = tp::shard_weight(W13.data(), 2 * H, D, {tp::Split::column, {H, H}}, t, 2);  // [8, 4]
  const V w2 = tp::shard_weight(W2.data(), D, H, {tp::Split::row, {}}, t, 2);               // [4, 4]
  ASSERT_EQ(w13.size(), 2u * Hl * D);
  ASSERT_EQ(w2.size(), static_cast<size_t>(D * Hl));
  const tp::TpLayer l13{&g, "seed000 ffn w1|w3"}, l2{&g, "seed000 ffn w2"};
  V gul(2 * Hl), zl(Hl), y(D), dzl(Hl), dgul(2 * Hl), dx(D), dw13(w13.size(), 0.0f), dw2(w2.size(), 0.0f);

  size_t mark = test::ledger_mark(g);
  tp::column_parallel_forward(gul.data(), nullptr, X.data(), w13.data(), 1, D, 2 * Hl, l13);
  swiglu_forward(zl.data(), gul.data(), 1, Hl);  // Z_A or Z_B
  tp::row_parallel_forward(y.data(), test::scratch(), zl.data(), w2.data(), 1, Hl, D, l2);
  const auto fwd = test::entries_since(g, mark, "tp");
  mark = test::ledger_mark(g);
  tp::row_parallel_backward(dzl.data(), dw2.data(), test::scratch(), dY.data(), zl.data(), w2.data(), 1, Hl,
                            D, l2);
  swiglu_backward(dgul.data(), dzl.data(), gul.data(), 1, Hl);
  tp::column_parallel_backward(dx.data(), dw13.data(), test::scratch(), dgul.data(), X.data(), w13.data(), 1,
                               D, 2 * Hl, l13);
  const auto bwd = test::entries_since(g, mark, "tp");

  ASSERT_EQ(fwd.size(), 1u);
  EXPECT_EQ(fwd[0].op, "all_reduce");
  EXPECT_EQ(fwd[0].elements, D);
  EXPECT_EQ(fwd[0].label, "seed000 ffn w2: reduce_from_tp forward [1, 4]");
  ASSERT_EQ(bwd.size(), 1u);  // dX only; no all-reduce of w2's [4, 4] gradient
  EXPECT_EQ(bwd[0].op, "all_reduce");
  EXPECT_EQ(bwd[0].elements, D);
  EXPECT_EQ(bwd[0].label, "seed000 ffn w1|w3: copy_to_tp backward [1, 4]");
  if (test::world().rank() == 0) {
    for (const auto* e : {&fwd[0], &bwd[0]})
      std::printf("seed000 ledger: %s %s %lld elements (%lld bytes) \"%s\"\n", e->op.c_str(), e->axis.c_str(),
                  static_cast<long long>(e->elements), static_cast<long long>(e->bytes), e->label.c_str());
  }

  // Bounds: the one-process fp32 run's own distance from the double one, on
  // the same pieces, times testing::layout_tol's 10 (floor: a sum of H terms).
  V gu1(2 * H), z1(H), y1(D), dz1(H), dgu1(2 * H), dx1(D), dw13_1(2 * H * D, 0.0f), dw2_1(D * H, 0.0f);
  linear_forward(gu1.data(), X.data(), W13.data(), 1, D, 2 * H);
  swiglu_forward(z1.data(), gu1.data(), 1, H);
  linear_forward(y1.data(), z1.data(), W2.data(), 1, H, D);
  linear_backward(dz1.data(), dw2_1.data(), dY.data(), z1.data(), W2.data(), 1, H, D);
  swiglu_backward(dgu1.data(), dz1.data(), gu1.data(), 1, H);
  linear_backward(dx1.data(), dw13_1.data(), dgu1.data(), X.data(), W13.data(), 1, D, 2 * H);
  const auto tol = [&](const V& one, const std::vector<double>& exact) {
    return testing::layout_tol(rel_err(one, exact), H);
  };
  EXPECT_TRUE(testing::below(rel_err(y, Y), tol(y1, Y), "y"));
  EXPECT_TRUE(testing::below(rel_err(dx, dX), tol(dx1, dX), "dx"));
  const auto dw2_want = block(dW2, H, 0, D, t * Hl, Hl);  // w2_A or w2_B's own gradient
  EXPECT_TRUE(
      testing::below(rel_err(dw2, dw2_want), tol(block(dw2_1, H, 0, D, t * Hl, Hl), dw2_want), "dw2"));
  auto want = block(dW13, D, t * Hl, Hl, 0, D);               // w1 rows of this rank …
  const auto w3_rows = block(dW13, D, H + t * Hl, Hl, 0, D);  // … then its w3 rows
  want.insert(want.end(), w3_rows.begin(), w3_rows.end());
  auto one = block(dw13_1, D, t * Hl, Hl, 0, D);
  const auto one_w3 = block(dw13_1, D, H + t * Hl, Hl, 0, D);
  one.insert(one.end(), one_w3.begin(), one_w3.end());
  EXPECT_TRUE(testing::below(rel_err(dw13, want), tol(one, want), "dw13"));
}

}  // namespace
}  // namespace mt

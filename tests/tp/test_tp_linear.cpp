// Column- and row-parallel linear layers and the column → SwiGLU → row MLP on
// tp = world size, against the one-process computation on the full tensors
// (double references of ops/reference.h). Outputs and input gradients are
// compared in this rank's layout; weight gradients must be this rank's slice of
// the full weight gradient, sliced here by index arithmetic (not by the plan
// helper under test). Parameter gradients start at 1 to check that they
// accumulate.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "comm/mpi_test.h"
#include "core/error.h"
#include "ops/gemm.h"
#include "ops/reference.h"
#include "ops/swiglu.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp_plan.h"
#include "tp_test_util.h"

namespace mt {
namespace {

using test::block;
using test::dot_tol;
using test::random_vec;
using test::rel_err;
using test::to_double;
using tp::SequenceParallel;

constexpr int64_t N = 8;  // tokens: divisible by 2 and 4 (SP)

std::vector<double> plus_one(std::vector<double> v) {
  for (double& x : v)
    x += 1.0;
  return v;
}

// A [4, 6] weight holding 0 … 23, split on tp = 2.
TEST(TpPlan, ShardsAreTheSlicesAndUnshardInverts) {
  std::vector<float> w(24);
  for (int i = 0; i < 24; ++i)
    w[static_cast<size_t>(i)] = static_cast<float>(i);
  const tp::WeightSplit col{tp::Split::column, {}}, row{tp::Split::row, {}}, fused{tp::Split::column, {2, 2}};
  EXPECT_EQ(tp::shard_weight(w.data(), 4, 6, col, 1, 2),
            (std::vector<float>{12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23}));
  EXPECT_EQ(tp::shard_weight(w.data(), 4, 6, row, 0, 2),
            (std::vector<float>{0, 1, 2, 6, 7, 8, 12, 13, 14, 18, 19, 20}));
  // Two fused blocks of 2 rows ([gate; up]): rank 1 holds gate row 1 and up row 3.
  EXPECT_EQ(tp::shard_weight(w.data(), 4, 6, fused, 1, 2),
            (std::vector<float>{6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23}));
  std::vector<float> back(24, -1.0f);
  for (int r = 0; r < 2; ++r) {
    const auto s = tp::shard_weight(w.data(), 4, 6, fused, r, 2);
    tp::unshard_weight(back.data(), s.data(), 4, 6, fused, r, 2);
  }
  EXPECT_EQ(back, w);
  EXPECT_EQ(tp::shard_shape(4, 6, row, 2), (std::vector<int64_t>{4, 3}));
  EXPECT_EQ(tp::weight_layout(4, 6, tp::Split::row).to_string(), "[4, 6] tp:S(1)");
  EXPECT_THROW(tp::shard_shape(10, 4, col, 4), ConfigError);
  EXPECT_THROW(tp::shard_shape(4, 6, tp::WeightSplit{tp::Split::column, {1, 3}}, 2), ConfigError);
}

// The plan table names each Hugging Face parameter's role, and tp_slice cuts it.
TEST(TpPlan, RolesAndSlices) {
  EXPECT_EQ(tp::plan_row("model.layers.3.self_attn.k_proj.weight").role, tp::Role::kv_replicated);
  EXPECT_EQ(tp::plan_row("model.layers.0.mlp.down_proj.weight").role, tp::Role::row);
  EXPECT_STREQ(tp::role_name(tp::plan_row("model.norm.weight").role), "replicated");
  EXPECT_THROW(tp::plan_row("model.layers.0.mlp.bias"), ConfigError);
  // 2 kv heads of 4 rows on tp 4: each head held whole by 2 ranks; rank 3 holds head 1.
  const tp::TpSlice kv = tp::tp_slice(tp::Role::kv_replicated, {8, 6}, 4, 3, 4);
  EXPECT_EQ(kv.map, ShardMap::rows);
  EXPECT_EQ(kv.first, 4);
  EXPECT_EQ(kv.count, 4);
  EXPECT_EQ(kv.holders, 2);
  // A vocabulary of 5 rows on tp 4: 2 rows each (padded), rank 2 holds row 4 and a pad row.
  const tp::TpSlice v = tp::tp_slice(tp::Role::vocab, {5, 3}, 4, 2);
  EXPECT_EQ(v.first, 4);
  EXPECT_EQ(v.count, 1);
  EXPECT_EQ(v.local_shape({5, 3}), (std::vector<int64_t>{2, 3}));
  const tp::TpSlice o = tp::tp_slice(tp::Role::row, {6, 8}, 2, 1);
  EXPECT_EQ(o.map, ShardMap::cols);
  EXPECT_EQ(o.first, 4);
  EXPECT_EQ(tp::tp_slice(tp::Role::replicated, {6}, 4, 1).holders, 4);
  EXPECT_THROW(tp::tp_slice(tp::Role::column, {6, 2}, 4, 0), ConfigError);
}

// The plan table also names the call sites of each weight's collectives: the
// labels of the comm ledger and --explain (docs/PARALLELISM.md "--explain").
TEST(TpPlan, SitesNameTheLedgerLabels) {
  EXPECT_EQ(tp::layer_site(3, "mlp.down_proj.weight"), "layer 3 mlp down");
  EXPECT_EQ(tp::layer_site(0, "model.layers.0.self_attn.q_proj.weight"), "layer 0 attn qkv");
  EXPECT_EQ(tp::layer_site(1, "self_attn.v_proj.weight"), "layer 1 attn k|v");
  EXPECT_EQ(tp::plan_row("lm_head.weight").site, "head");
  for (const tp::PlanRow& r : tp::llama_plan())
    EXPECT_FALSE(r.site.empty()) << r.suffix;
  EXPECT_THROW(tp::layer_site(0, "mlp.bias"), ConfigError);
}

class TpLinear : public ::testing::TestWithParam<SequenceParallel> {};

TEST_P(TpLinear, ColumnMatchesFull) {
  const int P = test::world().size(), t = test::world().rank();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const SequenceParallel sp = GetParam();
  const bool on = sp == SequenceParallel::on;
  constexpr int64_t IC = 6, OC = 8;
  const int64_t OCl = OC / P, Nl = N / P;
  const auto X = random_vec(N * IC, 1), W = random_vec(OC * IC, 2), dY = random_vec(N * OC, 3);
  std::vector<double> Y(N * OC), dX(N * IC), dW(OC * IC, 0.0);
  ref::linear_forward(Y.data(), to_double(X).data(), to_double(W).data(), N, IC, OC);
  ref::linear_backward(dX.data(), dW.data(), to_double(dY).data(), to_double(X).data(), to_double(W).data(),
                       N, IC, OC);

  const auto inp = on ? block(X, IC, t * Nl, Nl, 0, IC) : X;
  const auto w = block(W, IC, t * OCl, OCl, 0, IC);  // rows of this rank
  std::vector<float> out(N * OCl), inp_full(on ? N * IC : 0);
  const tp::TpLayer layer{&g, "test column", sp};
  tp::column_parallel_forward(out.data(), on ? inp_full.data() : nullptr, inp.data(), w.data(), N, IC, OCl,
                              layer);
  // Bounds: dot_tol's γ_{K+1}·(K + prior) with K the length of each sum.
  EXPECT_TRUE(testing::below(rel_err(out, block(Y, OC, 0, N, t * OCl, OCl)),
                             dot_tol(IC, block(Y, OC, 0, N, t * OCl, OCl)), "out"));
  if (on) {
    EXPECT_EQ(inp_full, X);
  }

  const auto dout = block(dY, OC, 0, N, t * OCl, OCl);
  std::vector<float> dinp(inp.size()), dw(w.size(), 1.0f);
  tp::column_parallel_backward(dinp.data(), dw.data(), test::scratch(), dout.data(),
                               on ? inp_full.data() : X.data(), w.data(), N, IC, OCl, layer);
  EXPECT_TRUE(testing::below(rel_err(dinp, on ? block(dX, IC, t * Nl, Nl, 0, IC) : dX),
                             dot_tol(OC, on ? block(dX, IC, t * Nl, Nl, 0, IC) : dX), "dinp"));
  EXPECT_TRUE(testing::below(rel_err(dw, plus_one(block(dW, IC, t * OCl, OCl, 0, IC))),
                             dot_tol(N, plus_one(block(dW, IC, t * OCl, OCl, 0, IC)), 1.0), "dw"));
}

TEST_P(TpLinear, RowMatchesFull) {
  const int P = test::world().size(), t = test::world().rank();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const SequenceParallel sp = GetParam();
  const bool on = sp == SequenceParallel::on;
  constexpr int64_t IC = 8, OC = 6;
  const int64_t ICl = IC / P, Nl = N / P;
  const auto X = random_vec(N * IC, 4), W = random_vec(OC * IC, 5), dY = random_vec(N * OC, 6);
  std::vector<double> Y(N * OC), dX(N * IC), dW(OC * IC, 0.0);
  ref::linear_forward(Y.data(), to_double(X).data(), to_double(W).data(), N, IC, OC);
  ref::linear_backward(dX.data(), dW.data(), to_double(dY).data(), to_double(X).data(), to_double(W).data(),
                       N, IC, OC);

  const auto inp = block(X, IC, 0, N, t * ICl, ICl);  // input columns of this rank
  const auto w = block(W, IC, 0, OC, t * ICl, ICl);
  std::vector<float> out((on ? Nl : N) * OC);
  const tp::TpLayer layer{&g, "test row", sp};
  tp::row_parallel_forward(out.data(), test::scratch(), inp.data(), w.data(), N, ICl, OC, layer);
  // Bounds: dot_tol's γ_{K+1}·(K + prior); the rank partials and their
  // all-reduce or reduce-scatter are one sum of IC terms in another order.
  EXPECT_TRUE(testing::below(rel_err(out, on ? block(Y, OC, t * Nl, Nl, 0, OC) : Y),
                             dot_tol(IC, on ? block(Y, OC, t * Nl, Nl, 0, OC) : Y), "out"));

  const auto dout = on ? block(dY, OC, t * Nl, Nl, 0, OC) : dY;
  std::vector<float> dinp(inp.size()), dw(w.size(), 1.0f);
  tp::row_parallel_backward(dinp.data(), dw.data(), test::scratch(), dout.data(), inp.data(), w.data(), N,
                            ICl, OC, layer);
  EXPECT_TRUE(testing::below(rel_err(dinp, block(dX, IC, 0, N, t * ICl, ICl)),
                             dot_tol(OC, block(dX, IC, 0, N, t * ICl, ICl)), "dinp"));
  EXPECT_TRUE(testing::below(rel_err(dw, plus_one(block(dW, IC, 0, OC, t * ICl, ICl))),
                             dot_tol(N, plus_one(block(dW, IC, 0, OC, t * ICl, ICl)), 1.0), "dw"));
}

// gate|up fused [2F, C] column-parallel, SwiGLU on the local hidden slice,
// down [C, F] row-parallel: the Llama MLP.
TEST_P(TpLinear, SwiGluMlpMatchesFull) {
  const int P = test::world().size(), t = test::world().rank();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const SequenceParallel sp = GetParam();
  const bool on = sp == SequenceParallel::on;
  constexpr int64_t C = 6, F = 8;
  const int64_t Fl = F / P, Nl = N / P;
  const auto X = random_vec(N * C, 7), Wgu = random_vec(2 * F * C, 8), Wd = random_vec(C * F, 9),
             dY = random_vec(N * C, 10);
  // One process, double.
  std::vector<double> gu(N * 2 * F), h(N * F), Y(N * C), dh(N * F), dgu(N * 2 * F), dX(N * C);
  std::vector<double> dWgu(2 * F * C, 0.0), dWd(C * F, 0.0);
  ref::linear_forward(gu.data(), to_double(X).data(), to_double(Wgu).data(), N, C, 2 * F);
  ref::swiglu_forward(h.data(), gu.data(), N, F);
  ref::linear_forward(Y.data(), h.data(), to_double(Wd).data(), N, F, C);
  ref::linear_backward(dh.data(), dWd.data(), to_double(dY).data(), h.data(), to_double(Wd).data(), N, F, C);
  ref::swiglu_backward(dgu.data(), dh.data(), gu.data(), N, F);
  ref::linear_backward(dX.data(), dWgu.data(), dgu.data(), to_double(X).data(), to_double(Wgu).data(), N, C,
                       2 * F);

  // One process, fp32: its distance from the double run sets the layout's
  // bound (testing::layout_tol; K = the longest sum, C, F or N).
  std::vector<float> gu1(N * 2 * F), h1(N * F), y1(N * C), dh1(N * F), dgu1(N * 2 * F), dx1(N * C),
      dwgu1(2 * F * C, 1.0f), dwd1(C * F, 1.0f);
  linear_forward(gu1.data(), X.data(), Wgu.data(), N, C, 2 * F);
  swiglu_forward(h1.data(), gu1.data(), N, F);
  linear_forward(y1.data(), h1.data(), Wd.data(), N, F, C);
  linear_backward(dh1.data(), dwd1.data(), dY.data(), h1.data(), Wd.data(), N, F, C);
  swiglu_backward(dgu1.data(), dh1.data(), gu1.data(), N, F);
  linear_backward(dx1.data(), dwgu1.data(), dgu1.data(), X.data(), Wgu.data(), N, C, 2 * F);
  const int64_t K = std::max({C, F, N});
  const double tol_y = testing::layout_tol(rel_err(y1, Y), K),
               tol_dx = testing::layout_tol(rel_err(dx1, dX), K),
               tol_dwd = testing::layout_tol(rel_err(dwd1, plus_one(dWd)), K),
               tol_dwgu = testing::layout_tol(rel_err(dwgu1, plus_one(dWgu)), K);

  // tp ranks.
  const tp::WeightSplit gate_up{tp::Split::column, {F, F}}, down{tp::Split::row, {}};
  const auto wgu = tp::shard_weight(Wgu.data(), 2 * F, C, gate_up, t, P);
  const auto wd = tp::shard_weight(Wd.data(), C, F, down, t, P);
  const auto x = on ? block(X, C, t * Nl, Nl, 0, C) : X;
  std::vector<float> x_full(on ? N * C : 0), gul(N * 2 * Fl), hl(N * Fl), y((on ? Nl : N) * C);
  const tp::TpLayer up{&g, "test mlp up", sp}, dn{&g, "test mlp down", sp};
  tp::column_parallel_forward(gul.data(), x_full.data(), x.data(), wgu.data(), N, C, 2 * Fl, up);
  swiglu_forward(hl.data(), gul.data(), N, Fl);
  tp::row_parallel_forward(y.data(), test::scratch(), hl.data(), wd.data(), N, Fl, C, dn);
  EXPECT_TRUE(testing::below(rel_err(y, on ? block(Y, C, t * Nl, Nl, 0, C) : Y), tol_y, "y"));

  const auto dy = on ? block(dY, C, t * Nl, Nl, 0, C) : dY;
  std::vector<float> dhl(N * Fl), dgul(N * 2 * Fl), dx(x.size()), dwgu(wgu.size(), 1.0f),
      dwd(wd.size(), 1.0f);
  tp::row_parallel_backward(dhl.data(), dwd.data(), test::scratch(), dy.data(), hl.data(), wd.data(), N, Fl,
                            C, dn);
  swiglu_backward(dgul.data(), dhl.data(), gul.data(), N, Fl);
  tp::column_parallel_backward(dx.data(), dwgu.data(), test::scratch(), dgul.data(),
                               on ? x_full.data() : X.data(), wgu.data(), N, C, 2 * Fl, up);
  EXPECT_TRUE(testing::below(rel_err(dx, on ? block(dX, C, t * Nl, Nl, 0, C) : dX), tol_dx, "dx"));
  EXPECT_TRUE(testing::below(rel_err(dwd, plus_one(block(dWd, F, 0, C, t * Fl, Fl))), tol_dwd, "dwd"));
  // This rank's gate rows, then its up rows, of the full gradient.
  auto want = block(dWgu, C, t * Fl, Fl, 0, C);
  const auto up_rows = block(dWgu, C, F + t * Fl, Fl, 0, C);
  want.insert(want.end(), up_rows.begin(), up_rows.end());
  EXPECT_TRUE(testing::below(rel_err(dwgu, plus_one(want)), tol_dwgu, "dwgu"));
}

// The fused residual mode: out = resid + the row layer's reduced output.
TEST_P(TpLinear, RowWithResidualAddsItOnce) {
  const int P = test::world().size(), t = test::world().rank();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const bool on = GetParam() == SequenceParallel::on;
  constexpr int64_t IC = 8, OC = 6;
  const int64_t ICl = IC / P, Nl = N / P, No = on ? Nl : N;
  const auto X = random_vec(N * IC, 11), W = random_vec(OC * IC, 12), R = random_vec(N * OC, 13);
  std::vector<double> Y(N * OC);
  ref::linear_forward(Y.data(), to_double(X).data(), to_double(W).data(), N, IC, OC);
  for (int64_t i = 0; i < N * OC; ++i)
    Y[static_cast<size_t>(i)] += R[static_cast<size_t>(i)];
  const auto inp = block(X, IC, 0, N, t * ICl, ICl);
  const auto w = block(W, IC, 0, OC, t * ICl, ICl);
  const auto resid = on ? block(R, OC, t * Nl, Nl, 0, OC) : R;
  std::vector<float> out(No * OC);
  tp::row_parallel_forward(out.data(), test::scratch(), inp.data(), w.data(), N, ICl, OC,
                           {&g, "test row resid", GetParam()}, resid.data());
  EXPECT_TRUE(testing::below(rel_err(out, on ? block(Y, OC, t * Nl, Nl, 0, OC) : Y),
                             dot_tol(IC, on ? block(Y, OC, t * Nl, Nl, 0, OC) : Y, 1.0),
                             "out"));  // + |resid| ≤ 1
}

INSTANTIATE_TEST_SUITE_P(Sp, TpLinear, ::testing::Values(SequenceParallel::off, SequenceParallel::on),
                         [](const ::testing::TestParamInfo<SequenceParallel>& p) {
                           return p.param == SequenceParallel::on ? "sp_on" : "sp_off";
                         });

// Without a tp group the layers are exactly ops/gemm.h's linear layer (the
// model's one-process path): bitwise, with the residual fused by accumulation.
TEST(TpLinearLocal, WithoutAGroupIsThePlainLinear) {
  constexpr int64_t IC = 5, OC = 3;
  const auto X = random_vec(N * IC, 14), W = random_vec(OC * IC, 15), R = random_vec(N * OC, 16),
             dY = random_vec(N * OC, 17);
  const tp::TpLayer none{nullptr, "local"};
  std::vector<float> out(N * OC), want(N * OC);
  tp::column_parallel_forward(out.data(), nullptr, X.data(), W.data(), N, IC, OC, none);
  linear_forward(want.data(), X.data(), W.data(), N, IC, OC);
  EXPECT_EQ(out, want);
  tp::row_parallel_forward(out.data(), nullptr, X.data(), W.data(), N, IC, OC, none, R.data());
  want = R;
  linear_forward(want.data(), X.data(), W.data(), N, IC, OC, Out::add);
  EXPECT_EQ(out, want);
  std::vector<float> dx(N * IC), dw(OC * IC, 1.0f), want_dx(N * IC), want_dw(OC * IC, 1.0f);
  tp::column_parallel_backward(dx.data(), dw.data(), nullptr, dY.data(), X.data(), W.data(), N, IC, OC, none);
  linear_backward(want_dx.data(), want_dw.data(), dY.data(), X.data(), W.data(), N, IC, OC);
  EXPECT_EQ(dx, want_dx);
  EXPECT_EQ(dw, want_dw);
}

// Rows held alike by every rank (a kv head replicated over tp): their weight
// gradient is the sum of every rank's contribution, added once to what the
// gradient held; the other rows keep this rank's own contribution.
TEST(TpLinearReplicated, ReplicatedRowsAreSummedOverTheirGroup) {
  const int P = test::world().size(), t = test::world().rank();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  constexpr int64_t IC = 4, OC = 3, first = 1, count = 2;  // rows 1 and 2 replicated
  const auto X = random_vec(N * IC, 18), W = random_vec(OC * IC, 19);
  std::vector<double> want(OC * IC, 1.0), mine(OC * IC, 0.0);
  for (int r = 0; r < P; ++r) {
    std::vector<double> dW(OC * IC, 0.0), dX(N * IC);
    const auto dYr = random_vec(N * OC, static_cast<uint32_t>(20 + r));
    ref::linear_backward(dX.data(), dW.data(), to_double(dYr).data(), to_double(X).data(),
                         to_double(W).data(), N, IC, OC);
    for (int64_t i = 0; i < OC * IC; ++i) {
      const bool rep = i / IC >= first && i / IC < first + count;
      if (rep || r == t) want[static_cast<size_t>(i)] += dW[static_cast<size_t>(i)];
    }
  }
  const auto dY = random_vec(N * OC, static_cast<uint32_t>(20 + t));
  std::vector<float> dw(OC * IC, 1.0f), rep_scratch(count * IC);
  const tp::ReplicatedRows rep{&g, first, count, IC, rep_scratch.data(), "test kv"};
  tp::column_parallel_backward(nullptr, dw.data(), nullptr, dY.data(), X.data(), W.data(), N, IC, OC,
                               {&g, "test column"}, rep);
  EXPECT_TRUE(testing::below(rel_err(dw, want), dot_tol(P * N, want, 1.0),
                             "dw"));  // N terms on each of P ranks, + the prior 1
}

}  // namespace
}  // namespace mt

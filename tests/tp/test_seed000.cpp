// Seed 000 reproduced from a real run: the SwiGLU FFN (dim 4, hidden 8) on the
// seed's 2-D mesh, tp 2 × dp 2 with ZeRO-3 (FSDP) over dp (§2.1):
//
//   rank (NPU)   tp   dp   stores (§3.2)                      its token
//   0            0    0    w1_A, w3_A, w2_A rows [0, 2)       X
//   1            1    0    w1_B, w3_B, w2_B rows [0, 2)       X
//   2            0    1    w1_A, w3_A, w2_A rows [2, 4)       X'
//   3            1    1    w1_B, w3_B, w2_B rows [2, 4)       X'
//
// The tp shards are column-parallel w1, w3 ([4, 4] of [8, 4]) and row-parallel
// w2 ([4, 4] of [4, 8]); a DataParallelStore (zero 3) over dp holds one unit
// with the three, each split by rows in two: 3 × [2, 4] per rank. The seed
// gives no numbers, so the weights and tokens are fixed pseudo-random values.
// The checks read the comm ledger of the step and the --explain text:
//   §4.1   all-gather over dp of this rank's 3 × [2, 4] = 24 elements (before
//          the forward, and again before the backward: ZeRO-3 frees the
//          gathered unit in between);
//   §4.3.3 forward: one all-reduce of Y [1, 4] over tp;
//   §5.2   backward: one all-reduce of dX [1, 4] over tp, and NO all-reduce of
//          w2's gradient — the seed's table (§6 "反向-w2梯度 All-Reduce") has one,
//          but tp ranks hold different w2 shards, so there is nothing to agree on;
//   §5.3   one reduce-scatter over dp of the unit's weight gradients (the two
//          tokens' gradients summed, each rank keeping its rows).
// Then y, dX and the reassembled full gradients against one process in double.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm/context.h"
#include "comm/mpi_test.h"
#include "ops/gemm.h"
#include "ops/reference.h"
#include "ops/swiglu.h"
#include "parallel/data_parallel.h"
#include "parallel/shard.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp_plan.h"
#include "tp_test_util.h"
#include "train/explain.h"

namespace mt {
namespace {

using test::rel_err;
using test::to_double;
using test::world;
using V = std::vector<float>;

constexpr int64_t D = 4, H = 8, Hl = 4;  // dim, hidden_dim, hidden per tp rank
constexpr int64_t kStep = 0;             // the step the ledger entries are recorded in

// The unit of the store: the tp-local shards [w1_t; w3_t; w2_t], each [4, 4],
// w1_t and w3_t adjacent so that they are one fused [8, 4] column-parallel weight.
UnitSpec ffn_unit() {
  UnitSpec u;
  u.name = "seed000 ffn";
  u.begin = 0;
  u.end = 3 * Hl * D;
  u.params = {{"w1", 0, Hl, D}, {"w3", Hl * D, Hl, D}, {"w2", 2 * Hl * D, D, Hl}};
  return u;
}

int count(const std::vector<LedgerEntry>& es, const std::string& op, const std::string& axis) {
  int n = 0;
  for (const auto& e : es)
    n += e.op == op && e.axis == axis ? 1 : 0;
  return n;
}

class Seed000 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (world().size() != 4) GTEST_SKIP() << "the tp 2 × dp 2 worked example runs on 4 ranks";
  }
};

TEST_F(Seed000, FfnOnTp2TimesFsdp2FromARealRun) {
  DeviceMesh mesh(world(), MeshSizes{.dp = 2, .tp = 2});
  Group tp = mesh.group("tp"), dp = mesh.group("dp");
  const int t = mesh.coord("tp"), d = mesh.coord("dp");
  EXPECT_EQ(world().rank(), 2 * d + t);  // §2.1: tp groups {0, 1}, {2, 3}; dp groups {0, 2}, {1, 3}

  // Full weights [out, in], and each dp replica's token with its fixed dL/dY.
  const V W1 = test::random_vec(H * D, 21), W3 = test::random_vec(H * D, 23),
          W2 = test::random_vec(D * H, 22);
  const V X = test::random_vec(D, 100 + static_cast<uint32_t>(d));
  const V dY = test::random_vec(D, 200 + static_cast<uint32_t>(d));

  // The tp shards (§3.1), stored as one unit, sharded over dp by the store (§3.2).
  const tp::WeightSplit col{tp::Split::column, {}}, row{tp::Split::row, {}};
  const V w1 = tp::shard_weight(W1.data(), H, D, col, t, 2),
          w3 = tp::shard_weight(W3.data(), H, D, col, t, 2);
  const V w2 = tp::shard_weight(W2.data(), D, H, row, t, 2);
  V unit_params = w1;
  unit_params.insert(unit_params.end(), w3.begin(), w3.end());
  unit_params.insert(unit_params.end(), w2.begin(), w2.end());
  DataParallelOptions o;
  o.zero = 3;
  DataParallelStore store({ffn_unit()}, dp, o);
  store.scatter_full_params(unit_params.data());
  EXPECT_EQ(store.local_numel(), 3 * 2 * D);  // w1, w3, w2: [2, 4] each

  const tp::TpLayer l13{&tp, "seed000 ffn w1|w3"}, l2{&tp, "seed000 ffn w2"};
  V gu(2 * Hl), z(Hl), y(D), dz(Hl), dgu(2 * Hl), dx(D);
  CommContext& ctx = world().context();
  const int64_t saved_step = ctx.step;
  ctx.step = kStep;
  const size_t m0 = test::ledger_mark(world());
  store.begin_step(1);
  store.begin_microbatch(0, 0);
  {  // forward (§4): all-gather, [h1_t | h3_t] = X·[w1_t; w3_t]ᵀ, Z_t = silu(h1_t)·h3_t, Y = Σ_tp Z_t·w2_tᵀ
    const float* p = store.acquire_params(0, Pass::forward);
    tp::column_parallel_forward(gu.data(), nullptr, X.data(), p, 1, D, 2 * Hl, l13);
    swiglu_forward(z.data(), gu.data(), 1, Hl);
    tp::row_parallel_forward(y.data(), test::scratch(), z.data(), p + 2 * Hl * D, 1, Hl, D, l2);
    store.release_params(0, Pass::forward);
  }
  const size_t m1 = test::ledger_mark(world());
  {  // backward (§5)
    const float* p = store.acquire_params(0, Pass::backward);
    float* g = store.acquire_grads(0);
    tp::row_parallel_backward(dz.data(), g + 2 * Hl * D, test::scratch(), dY.data(), z.data(), p + 2 * Hl * D,
                              1, Hl, D, l2);
    swiglu_backward(dgu.data(), dz.data(), gu.data(), 1, Hl);
    tp::column_parallel_backward(dx.data(), g, test::scratch(), dgu.data(), X.data(), p, 1, D, 2 * Hl, l13);
    store.release_grads(0);
    store.release_params(0, Pass::backward);
    store.finish_grads();
  }
  const auto& all = ctx.ledger.entries();
  const std::vector<LedgerEntry> fwd(all.begin() + static_cast<std::ptrdiff_t>(m0),
                                     all.begin() + static_cast<std::ptrdiff_t>(m1));
  const std::vector<LedgerEntry> bwd(all.begin() + static_cast<std::ptrdiff_t>(m1), all.end());
  const std::string lines = explain_lines(ctx.ledger, kStep, world().rank());
  const std::string report = explain_report(world(), kStep);
  ctx.step = saved_step;

  // ---- the ledger of the step ----
  EXPECT_EQ(ctx.ledger.step_entries(kStep).size(), fwd.size() + bwd.size());
  // §4.1: this rank's block of the all-gather is its 3 × [2, 4] shard.
  for (const auto* pass : {&fwd, &bwd}) {
    EXPECT_EQ(count(*pass, "all_gather", "dp"), 1);
    for (const auto& e : *pass) {
      if (e.op == "all_gather") {
        EXPECT_EQ(e.elements, 3 * 2 * 4) << e.label;
      }
    }
  }
  // §4.3.3: the forward's one tp collective is the all-reduce of Y [1, 4].
  EXPECT_EQ(fwd.size(), 2u);
  EXPECT_EQ(count(fwd, "all_reduce", "tp"), 1);
  for (const auto& e : fwd) {
    if (e.axis == "tp") {
      EXPECT_EQ(e.elements, D);
      EXPECT_EQ(e.label, "seed000 ffn w2: reduce_from_tp forward [1, 4]");
    }
  }
  // §5.2–5.3: the backward's tp collective is dX's all-reduce (none for w2's
  // gradient); over dp, one reduce-scatter of the unit's gradient (P · 24 elements in).
  EXPECT_EQ(bwd.size(), 3u);
  int tp_calls = 0;
  for (const auto& e : bwd) {
    if (e.axis == "tp") {
      ++tp_calls;
      EXPECT_EQ(e.op, "all_reduce");
      EXPECT_EQ(e.elements, D);
      EXPECT_EQ(e.label, "seed000 ffn w1|w3: copy_to_tp backward [1, 4]");
    }
    EXPECT_EQ(e.label.find("w2"), std::string::npos) << "a backward collective of w2: " << e.label;
  }
  EXPECT_EQ(tp_calls, 1);
  EXPECT_EQ(count(bwd, "reduce_scatter", "dp"), 1);
  for (const auto& e : bwd) {
    if (e.op == "reduce_scatter") {
      EXPECT_EQ(e.elements, 2 * 3 * 2 * 4) << e.label;
    }
  }

  // ---- the same, as --explain prints it ----
  const std::string r = "rank " + std::to_string(world().rank());
  EXPECT_EQ(
      lines,
      r + ": 5 collectives in step 0\n" +                                             //
          r + " | dp | all_gather     | [24] | 24 elements | seed000 ffn params\n" +  //
          r + " | tp | all_reduce     | [1, 4] | 4 elements | seed000 ffn w2: reduce_from_tp forward\n" + r +
          " | dp | all_gather     | [24] | 24 elements | seed000 ffn params\n" +  //
          r + " | tp | all_reduce     | [1, 4] | 4 elements | seed000 ffn w1|w3: copy_to_tp backward\n" + r +
          " | dp | reduce_scatter | [48] | 48 elements | seed000 ffn grads\n");
  if (world().rank() == 0) {
    EXPECT_EQ(report.substr(0, lines.size()), lines);
    EXPECT_NE(report.find("rank 3: 5 collectives in step 0\n"), std::string::npos);
    std::printf("seed 000 from a real run (--explain):\n%s", report.c_str());
  } else {
    EXPECT_EQ(report, "");
  }

  // ---- numbers: one process, double, both tokens as a batch of 2 ----
  std::vector<double> X2(2 * D), dY2(2 * D);
  for (int r2 = 0; r2 < 2; ++r2) {
    const V x = test::random_vec(D, 100 + static_cast<uint32_t>(r2));
    const V dy = test::random_vec(D, 200 + static_cast<uint32_t>(r2));
    for (int64_t i = 0; i < D; ++i) {
      X2[static_cast<size_t>(r2 * D + i)] = x[static_cast<size_t>(i)];
      dY2[static_cast<size_t>(r2 * D + i)] = dy[static_cast<size_t>(i)];
    }
  }
  V W13 = W1;  // [w1; w3], [16, 4]: one GEMM gives [h1 | h3]
  W13.insert(W13.end(), W3.begin(), W3.end());
  std::vector<double> GU(2 * 2 * H), Z(2 * H), Y(2 * D), dZ(2 * H), dGU(2 * 2 * H), dX(2 * D);
  std::vector<double> dW13(2 * H * D, 0.0), dW2(D * H, 0.0);
  ref::linear_forward(GU.data(), X2.data(), to_double(W13).data(), 2, D, 2 * H);
  ref::swiglu_forward(Z.data(), GU.data(), 2, H);
  ref::linear_forward(Y.data(), Z.data(), to_double(W2).data(), 2, H, D);
  ref::linear_backward(dZ.data(), dW2.data(), dY2.data(), Z.data(), to_double(W2).data(), 2, H, D);
  ref::swiglu_backward(dGU.data(), dZ.data(), GU.data(), 2, H);
  ref::linear_backward(dX.data(), dW13.data(), dGU.data(), X2.data(), to_double(W13).data(), 2, D, 2 * H);

  auto token = [&](const std::vector<double>& m) {
    return std::vector<double>(m.begin() + d * D, m.begin() + (d + 1) * D);
  };
  // Bounds: the one-process fp32 run of the same batch, its own distance from
  // the double one times testing::layout_tol's 10 (floor: a sum of H terms).
  const V X2f(X2.begin(), X2.end()), dY2f(dY2.begin(), dY2.end());
  V gu1(2 * 2 * H), z1(2 * H), y1(2 * D), dz1(2 * H), dgu1(2 * 2 * H), dx1(2 * D), dw13_1(2 * H * D, 0.0f),
      dw2_1(D * H, 0.0f);
  linear_forward(gu1.data(), X2f.data(), W13.data(), 2, D, 2 * H);
  swiglu_forward(z1.data(), gu1.data(), 2, H);
  linear_forward(y1.data(), z1.data(), W2.data(), 2, H, D);
  linear_backward(dz1.data(), dw2_1.data(), dY2f.data(), z1.data(), W2.data(), 2, H, D);
  swiglu_backward(dgu1.data(), dz1.data(), gu1.data(), 2, H);
  linear_backward(dx1.data(), dw13_1.data(), dgu1.data(), X2f.data(), W13.data(), 2, D, 2 * H);
  const auto tol = [&](const V& one, const std::vector<double>& exact) {
    return testing::layout_tol(rel_err(one, exact), H);
  };
  const auto token_f = [&](const V& m) { return V(m.begin() + d * D, m.begin() + (d + 1) * D); };
  EXPECT_TRUE(testing::below(rel_err(y, token(Y)), tol(token_f(y1), token(Y)), "y"));
  EXPECT_TRUE(testing::below(rel_err(dx, token(dX)), tol(token_f(dx1), token(dX)), "dx"));

  // Unshard the gradient: all-gather the dp shards into the tp-local unit, then
  // put each tp rank's shards in place of the full weights and sum over tp.
  V packed(static_cast<size_t>(2 * store.local_numel())), unit_grads(static_cast<size_t>(ffn_unit().numel()));
  dp.all_gather(store.local_grads(), packed.data(), store.local_numel(), ElemType::f32, "test: gather grads");
  const UnitSpec unit = ffn_unit();
  UnitShards(unit, 2).unpack(packed.data(), unit_grads.data());
  V dW1_full(H * D, 0.0f), dW3_full(H * D, 0.0f), dW2_full(D * H, 0.0f);
  tp::unshard_weight(dW1_full.data(), unit_grads.data(), H, D, col, t, 2);
  tp::unshard_weight(dW3_full.data(), unit_grads.data() + Hl * D, H, D, col, t, 2);
  tp::unshard_weight(dW2_full.data(), unit_grads.data() + 2 * Hl * D, D, H, row, t, 2);
  for (V* g : {&dW1_full, &dW3_full, &dW2_full})
    tp.all_reduce(g->data(), static_cast<int64_t>(g->size()), "test: reassemble grads");
  const std::vector<double> dW1(dW13.begin(), dW13.begin() + H * D), dW3(dW13.begin() + H * D, dW13.end());
  const V dW1_1(dw13_1.begin(), dw13_1.begin() + H * D), dW3_1(dw13_1.begin() + H * D, dw13_1.end());
  EXPECT_TRUE(testing::below(rel_err(dW1_full, dW1), tol(dW1_1, dW1), "dW1"));
  EXPECT_TRUE(testing::below(rel_err(dW3_full, dW3), tol(dW3_1, dW3), "dW3"));
  EXPECT_TRUE(testing::below(rel_err(dW2_full, dW2), tol(dw2_1, dW2), "dW2"));
}

}  // namespace
}  // namespace mt

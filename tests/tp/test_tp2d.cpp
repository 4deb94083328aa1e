// 2-D tensor parallelism's layer math (parallel/tp2d_linear.h) on an R × C
// grid (2 × 1 on 2 ranks, 2 × 2 on 4): the MLP block of a decoder layer,
// x + down(swiglu(gate|up(rmsnorm(x)))), with every tensor split as
// docs/PARALLELISM.md "2-D tensor parallelism" says, forward and backward,
// against the same block on full tensors (ops/), 1e-5; and its comm ledger
// against the analytic count of that section; and the attention half.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/mpi_test.h"
#include "mesh/mesh.h"
#include "ops/attention.h"
#include "ops/attention_reference.h"
#include "ops/gemm.h"
#include "ops/reference.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"
#include "parallel/tp2d_linear.h"
#include "parallel/tp_plan.h"
#include "tp_test_util.h"

namespace mt {
namespace {

// Columns of each block of a [rows, k] matrix whose feature dim is split
// first over `outer` ranks (block o), then over `inner` (block i of it);
// fused blocks (sizes) are cut one by one and stacked.
template <typename T>
std::vector<T> cols_of(const std::vector<T>& m, int64_t rows, int64_t k, const std::vector<int64_t>& blocks,
                       int64_t outer, int64_t o, int64_t inner, int64_t i) {
  std::vector<T> out;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t off = 0;
    for (int64_t s : blocks) {
      const int64_t part = s / outer / inner, first = off + o * (s / outer) + i * part;
      for (int64_t c = first; c < first + part; ++c)
        out.push_back(m[static_cast<size_t>(r * k + c)]);
      off += s;
    }
  }
  return out;
}

// Rows of a [rows, cols] weight split over `g` ranks (block j of each fused block), stacked.
template <typename T>
std::vector<T> rows_of(const std::vector<T>& m, int64_t cols, const std::vector<int64_t>& blocks, int64_t g,
                       int64_t j) {
  std::vector<T> out;
  int64_t off = 0;
  for (int64_t s : blocks) {
    const auto b = test::block(m, cols, off + j * (s / g), s / g, 0, cols);
    out.insert(out.end(), b.begin(), b.end());
    off += s;
  }
  return out;
}

// A [rows, cols] weight's block: rows split over gr ranks (block jr, by fused
// row blocks), columns over gc ranks (block jc).
template <typename T>
std::vector<T> block2d(const std::vector<T>& m, int64_t cols, const std::vector<int64_t>& row_blocks,
                       int64_t gr, int64_t jr, int64_t gc, int64_t jc) {
  const auto r = rows_of(m, cols, row_blocks, gr, jr);
  const int64_t nrows = static_cast<int64_t>(r.size()) / cols;
  return test::block(r, cols, 0, nrows, jc * (cols / gc), cols / gc);
}

// Rank's piece of a full tensor as the parameter table cuts it (tp_plan.h tp2d_slice).
std::vector<float> plan_piece(const float* full, tp::Role role, const std::vector<int64_t>& shape,
                              const tp2d::Grid& grid, int rank) {
  const tp::TpSlice s = tp::tp2d_slice(role, shape, grid, rank);
  const std::vector<int64_t> local = s.local_shape(shape);
  const int64_t cols = local.size() > 1 ? local[1] : 1, numel = local[0] * cols;
  std::vector<float> out(static_cast<size_t>(numel), 0.0f);
  tp::for_each_run(
      s, cols, shape.size() > 1 ? shape[1] : 1, numel, 0, numel,
      [&](int64_t li, int64_t gi, int64_t n) { std::copy(full + gi, full + gi + n, out.data() + li); });
  return out;
}

struct Counted {
  std::string op, axis;
  int64_t elements;
};

// The ledger entries [from, to) of tp's context against `want`, in order; an
// all-reduce is of doubles (the norms' row sums), the rest of floats. A
// sub-axis of one rank (tp_c on a 2 × 1 grid) has nothing to exchange and
// records nothing.
void expect_ledger(const Group& tp, size_t from, size_t to, std::vector<Counted> want, int64_t C) {
  std::erase_if(want, [&](const Counted& w) { return w.axis == "tp_c" && C == 1; });
  const auto& all = tp.context().ledger.entries();
  ASSERT_EQ(to - from, want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const LedgerEntry& e = all[from + i];
    EXPECT_EQ(e.op, want[i].op) << e.label;
    EXPECT_EQ(e.axis, want[i].axis) << e.label;
    EXPECT_EQ(e.elements, want[i].elements) << e.label;
    EXPECT_EQ(e.bytes, (e.op == "all_reduce" ? 8 : 4) * want[i].elements) << e.label;
  }
}

// The grid's two sub-axis groups, from the mesh (DeviceMesh::sub_group).
struct GridAxes {
  std::unique_ptr<Group> tp_r, tp_c;
};
GridAxes grid_axes(const DeviceMesh& mesh) {
  return {std::make_unique<Group>(*mesh.sub_group(SubAxis::tp_r)),
          std::make_unique<Group>(*mesh.sub_group(SubAxis::tp_c))};
}

TEST(Tp2d, MlpBlockMatchesOneProcessAndItsLedger) {
  const int P = test::world().size();
  if (P % 2 != 0) GTEST_SKIP() << "needs an even world";
  const tp2d::Grid grid{2, P / 2};
  const int64_t R = grid.rows, C = grid.cols;
  const DeviceMesh mesh(test::world(), MeshSizes{.tp = P},
                        SubAxisSizes{.tp_rows = static_cast<int>(grid.rows)});
  Group tp = mesh.group("tp");
  const GridAxes ax = grid_axes(mesh);
  const int64_t r = tp.rank() / C, c = tp.rank() % C;
  ASSERT_EQ(ax.tp_c->rank(), c);
  ASSERT_EQ(ax.tp_r->rank(), r);
  constexpr int64_t N = 6, d = 8, F = 12;
  const float eps = 1e-5f;
  const int64_t dl = d / (R * C), Fl = F / (R * C);

  // Full tensors, the same on every rank, and the one-process block.
  const auto X = test::random_vec(N * d, 11), Wn = test::random_vec(d, 12, 2.0f);
  const auto Wgu = test::random_vec(2 * F * d, 13), Wd = test::random_vec(d * F, 14),
             dY = test::random_vec(N * d, 15);
  std::vector<float> ln(N * d), rs(N), gu(N * 2 * F), h(N * F), Y(X);
  rmsnorm_forward(ln.data(), rs.data(), X.data(), Wn.data(), N, d, eps);
  linear_forward(gu.data(), ln.data(), Wgu.data(), N, d, 2 * F);
  swiglu_forward(h.data(), gu.data(), N, F);
  linear_forward(Y.data(), h.data(), Wd.data(), N, F, d, Out::add);
  std::vector<float> dh(N * F), dgu(N * 2 * F), dln(N * d), dX(N * d), dWn(d), dWgu(2 * F * d), dWd(d * F);
  linear_backward(dh.data(), dWd.data(), dY.data(), h.data(), Wd.data(), N, F, d);
  swiglu_backward(dgu.data(), dh.data(), gu.data(), N, F);
  linear_backward(dln.data(), dWgu.data(), dgu.data(), ln.data(), Wgu.data(), N, d, 2 * F);
  rmsnorm_backward(dX.data(), dWn.data(), dln.data(), X.data(), Wn.data(), rs.data(), N, d);
  for (int64_t i = 0; i < N * d; ++i)
    dX[static_cast<size_t>(i)] += dY[static_cast<size_t>(i)];  // the residual path
  // The same block in double: the one-process fp32 run's distance from it
  // sets the bounds (testing::layout_tol).
  const auto Xd = test::to_double(X), Wnd = test::to_double(Wn), Wgud = test::to_double(Wgu),
             Wdd = test::to_double(Wd), dYd = test::to_double(dY);
  std::vector<double> lnD(N * d), rsD(N), guD(N * 2 * F), hD(N * F), YD(N * d), dhD(N * F), dguD(N * 2 * F),
      dlnD(N * d), dXD(N * d), dWnD(d, 0.0), dWguD(2 * F * d, 0.0), dWdD(d * F, 0.0);
  ref::rmsnorm_forward(lnD.data(), rsD.data(), Xd.data(), Wnd.data(), N, d, eps);
  ref::linear_forward(guD.data(), lnD.data(), Wgud.data(), N, d, 2 * F);
  ref::swiglu_forward(hD.data(), guD.data(), N, F);
  ref::linear_forward(YD.data(), hD.data(), Wdd.data(), N, F, d);
  ref::linear_backward(dhD.data(), dWdD.data(), dYd.data(), hD.data(), Wdd.data(), N, F, d);
  ref::swiglu_backward(dguD.data(), dhD.data(), guD.data(), N, F);
  ref::linear_backward(dlnD.data(), dWguD.data(), dguD.data(), lnD.data(), Wgud.data(), N, d, 2 * F);
  ref::rmsnorm_backward(dXD.data(), dWnD.data(), dlnD.data(), Xd.data(), Wnd.data(), rsD.data(), N, d);
  for (int64_t i = 0; i < N * d; ++i) {
    YD[static_cast<size_t>(i)] += Xd[static_cast<size_t>(i)];
    dXD[static_cast<size_t>(i)] += dYd[static_cast<size_t>(i)];
  }

  // This rank's pieces: the residual stream's features, block r over R then c over C.
  const auto x = cols_of(X, N, d, {d}, R, r, C, c), dy = cols_of(dY, N, d, {d}, R, r, C, c);
  const auto wn = cols_of(Wn, 1, d, {d}, R, r, C, c);
  const auto wgu = block2d(Wgu, d, {F, F}, C, c, R, r);  // [2F/C, d/R]
  const auto wd = block2d(Wd, F, {d}, R, r, C, c);       // [d/R, F/C]
  // The parameter table's pieces (gate and up are two parameters) are these.
  auto gate_up = plan_piece(Wgu.data(), tp::Role::column, {F, d}, grid, tp.rank());
  const auto up_piece = plan_piece(Wgu.data() + F * d, tp::Role::column, {F, d}, grid, tp.rank());
  gate_up.insert(gate_up.end(), up_piece.begin(), up_piece.end());
  EXPECT_EQ(gate_up, wgu);
  EXPECT_EQ(plan_piece(Wd.data(), tp::Role::row, {d, F}, grid, tp.rank()), wd);
  EXPECT_EQ(plan_piece(Wn.data(), tp::Role::replicated, {d}, grid, tp.rank()), wn);
  const tp2d::Linear2d up{ax.tp_c.get(), ax.tp_r.get(), {F / C, F / C}, "layer 3 mlp gate"};
  const tp2d::Linear2d down{ax.tp_r.get(), ax.tp_c.get(), {}, "layer 3 mlp down"};
  std::vector<float> l(N * dl), rl(N), lf(N * d / R), g(N * 2 * Fl), hl(N * Fl), hf(N * F / C), y(N * dl);
  const size_t mark = test::ledger_mark(tp);
  tp2d::rmsnorm2d_forward(l.data(), rl.data(), x.data(), wn.data(), N, dl, d, eps, tp, "layer 3 ln2");
  tp2d::linear2d_forward(g.data(), lf.data(), test::scratch(), l.data(), wgu.data(), N, d / R, 2 * F / C, up);
  swiglu_forward(hl.data(), g.data(), N, Fl);
  tp2d::linear2d_forward(y.data(), hf.data(), test::scratch(), hl.data(), wd.data(), N, F / C, d / R, down);
  for (size_t i = 0; i < y.size(); ++i)
    y[i] += x[i];
  const size_t mid = test::ledger_mark(tp);
  std::vector<float> dhl(N * Fl), dg(N * 2 * Fl), dl_(N * dl), dx(N * dl), dwn(dl), dwgu(wgu.size()),
      dwd(wd.size());
  tp2d::linear2d_backward(dhl.data(), dwd.data(), test::scratch(), dy.data(), hf.data(), wd.data(), N, F / C,
                          d / R, down);
  swiglu_backward(dg.data(), dhl.data(), g.data(), N, Fl);
  tp2d::linear2d_backward(dl_.data(), dwgu.data(), test::scratch(), dg.data(), lf.data(), wgu.data(), N,
                          d / R, 2 * F / C, up);
  tp2d::rmsnorm2d_backward(dx.data(), dwn.data(), dl_.data(), x.data(), wn.data(), rl.data(), N, dl, d, tp,
                           "layer 3 ln2");
  for (size_t i = 0; i < dx.size(); ++i)
    dx[i] += dy[i];

  // Each piece against the one-process run's, within layout_tol of that
  // run's own distance from double on the same piece (K: the longest sum, F).
  const auto check = [&](const std::vector<float>& got, const std::vector<float>& one,
                         const std::vector<double>& exact, const char* what) {
    EXPECT_LT(test::rel_err(got, test::to_double(one)), testing::layout_tol(test::rel_err(one, exact), F))
        << what;
  };
  check(y, cols_of(Y, N, d, {d}, R, r, C, c), cols_of(YD, N, d, {d}, R, r, C, c), "y");
  check(dx, cols_of(dX, N, d, {d}, R, r, C, c), cols_of(dXD, N, d, {d}, R, r, C, c), "dx");
  check(dwn, cols_of(dWn, 1, d, {d}, R, r, C, c), cols_of(dWnD, 1, d, {d}, R, r, C, c), "dwn");
  check(dwgu, block2d(dWgu, d, {F, F}, C, c, R, r), block2d(dWguD, d, {F, F}, C, c, R, r), "dwgu");
  check(dwd, block2d(dWd, F, {d}, R, r, C, c), block2d(dWdD, F, {d}, R, r, C, c), "dwd");

  // The ledger: one all-gather and one reduce-scatter per linear layer each
  // way (an all-gather counts this rank's block, a reduce-scatter the whole
  // partial input: comm/context.h), and one all-reduce of N doubles per norm.
  const std::vector<Counted> fwd = {{"all_reduce", "tp", N},
                                    {"all_gather", "tp_c", N * dl},
                                    {"reduce_scatter", "tp_r", N * 2 * F / C},
                                    {"all_gather", "tp_r", N * Fl},
                                    {"reduce_scatter", "tp_c", N * d / R}};
  const std::vector<Counted> bwd = {{"all_gather", "tp_c", N * dl},
                                    {"reduce_scatter", "tp_r", N * F / C},
                                    {"all_gather", "tp_r", N * 2 * Fl},
                                    {"reduce_scatter", "tp_c", N * d / R},
                                    {"all_reduce", "tp", N}};
  expect_ledger(tp, mark, mid, fwd, C);
  expect_ledger(tp, mid, test::ledger_mark(tp), bwd, C);
}

// The attention half, x + o(attention(q|k|v(rmsnorm(x)))) without RoPE (which
// acts on each head alone): q|k|v is column-split by heads over tp_c, then its
// reduce-scatter over tp_r leaves each rank H/(RC) query heads and KV/(RC) kv
// heads (block c·R + r), whose attention is local.
TEST(Tp2d, AttentionBlockMatchesOneProcess) {
  const int P = test::world().size();
  if (P % 2 != 0) GTEST_SKIP() << "needs an even world";
  const tp2d::Grid grid{2, P / 2};
  const int64_t R = grid.rows, C = grid.cols, G = R * C;
  const DeviceMesh mesh(test::world(), MeshSizes{.tp = P},
                        SubAxisSizes{.tp_rows = static_cast<int>(grid.rows)});
  Group tp = mesh.group("tp");
  const GridAxes ax = grid_axes(mesh);
  const int64_t r = tp.rank() / C, c = tp.rank() % C;
  constexpr int64_t B = 2, T = 3, N = B * T, d = 16, H = 8, KV = 4, D = 2, Q = H * D, K = KV * D;
  constexpr int64_t QKV = Q + 2 * K;
  const float eps = 1e-5f;
  const int64_t dl = d / G;
  std::vector<int32_t> pos;
  for (int64_t b = 0; b < B; ++b)
    for (int32_t t = 0; t < T; ++t)
      pos.push_back(t);

  const auto X = test::random_vec(N * d, 21), Wn = test::random_vec(d, 22, 2.0f);
  const auto Wqkv = test::random_vec(QKV * d, 23), Wo = test::random_vec(d * Q, 24),
             dY = test::random_vec(N * d, 25);
  std::vector<float> ln(N * d), rs(N), qkv(N * QKV), att(N * Q), lse(B * H * T), Y(X);
  rmsnorm_forward(ln.data(), rs.data(), X.data(), Wn.data(), N, d, eps);
  linear_forward(qkv.data(), ln.data(), Wqkv.data(), N, d, QKV);
  const AttentionDims full{B, T, T, H, KV, D, QKV, QKV, Q};
  attention_forward(att.data(), lse.data(), qkv.data(), qkv.data() + Q, qkv.data() + Q + K, pos.data(),
                    pos.data(), full);
  linear_forward(Y.data(), att.data(), Wo.data(), N, Q, d, Out::add);
  std::vector<float> datt(N * Q), dqkv(N * QKV), dln(N * d), dX(N * d), dWn(d), dWqkv(QKV * d), dWo(d * Q);
  linear_backward(datt.data(), dWo.data(), dY.data(), att.data(), Wo.data(), N, Q, d);
  attention_backward(dqkv.data(), dqkv.data() + Q, dqkv.data() + Q + K, datt.data(), att.data(), lse.data(),
                     qkv.data(), qkv.data() + Q, qkv.data() + Q + K, pos.data(), pos.data(), full);
  linear_backward(dln.data(), dWqkv.data(), dqkv.data(), ln.data(), Wqkv.data(), N, d, QKV);
  rmsnorm_backward(dX.data(), dWn.data(), dln.data(), X.data(), Wn.data(), rs.data(), N, d);
  for (int64_t i = 0; i < N * d; ++i)
    dX[static_cast<size_t>(i)] += dY[static_cast<size_t>(i)];
  // The same block in double (testing::layout_tol's reference).
  const auto Xd = test::to_double(X), Wnd = test::to_double(Wn), Wqkvd = test::to_double(Wqkv),
             Wod = test::to_double(Wo), dYd = test::to_double(dY);
  std::vector<double> lnD(N * d), rsD(N), qkvD(N * QKV), attD(N * Q), lseD(B * H * T), YD(N * d),
      dattD(N * Q), dqkvD(N * QKV, 0.0), dlnD(N * d), dXD(N * d), dWnD(d, 0.0), dWqkvD(QKV * d, 0.0),
      dWoD(d * Q, 0.0);
  ref::rmsnorm_forward(lnD.data(), rsD.data(), Xd.data(), Wnd.data(), N, d, eps);
  ref::linear_forward(qkvD.data(), lnD.data(), Wqkvd.data(), N, d, QKV);
  ref::attention_forward(attD.data(), lseD.data(), qkvD.data(), qkvD.data() + Q, qkvD.data() + Q + K,
                         pos.data(), pos.data(), full);
  ref::linear_forward(YD.data(), attD.data(), Wod.data(), N, Q, d);
  ref::linear_backward(dattD.data(), dWoD.data(), dYd.data(), attD.data(), Wod.data(), N, Q, d);
  ref::attention_backward(dqkvD.data(), dqkvD.data() + Q, dqkvD.data() + Q + K, dattD.data(), attD.data(),
                          lseD.data(), qkvD.data(), qkvD.data() + Q, qkvD.data() + Q + K, pos.data(),
                          pos.data(), full);
  ref::linear_backward(dlnD.data(), dWqkvD.data(), dqkvD.data(), lnD.data(), Wqkvd.data(), N, d, QKV);
  ref::rmsnorm_backward(dXD.data(), dWnD.data(), dlnD.data(), Xd.data(), Wnd.data(), rsD.data(), N, d);
  for (int64_t i = 0; i < N * d; ++i) {
    YD[static_cast<size_t>(i)] += Xd[static_cast<size_t>(i)];
    dXD[static_cast<size_t>(i)] += dYd[static_cast<size_t>(i)];
  }

  const auto x = cols_of(X, N, d, {d}, R, r, C, c), dy = cols_of(dY, N, d, {d}, R, r, C, c);
  const auto wn = cols_of(Wn, 1, d, {d}, R, r, C, c);
  const auto wqkv = block2d(Wqkv, d, {Q, K, K}, C, c, R, r);  // [QKV/C, d/R]
  const auto wo = block2d(Wo, Q, {d}, R, r, C, c);            // [d/R, Q/C]
  // The parameter table's pieces (q, k, v are three parameters) are these.
  std::vector<float> q_k_v;
  for (const auto& [row0, rows] : {std::pair{int64_t{0}, Q}, std::pair{Q, K}, std::pair{Q + K, K}}) {
    const auto p = plan_piece(Wqkv.data() + row0 * d, tp::Role::column, {rows, d}, grid, tp.rank());
    q_k_v.insert(q_k_v.end(), p.begin(), p.end());
  }
  EXPECT_EQ(q_k_v, wqkv);
  EXPECT_EQ(plan_piece(Wo.data(), tp::Role::row, {d, Q}, grid, tp.rank()), wo);
  const tp2d::Linear2d in{ax.tp_c.get(), ax.tp_r.get(), {Q / C, K / C, K / C}, "layer 0 attn qkv"};
  const tp2d::Linear2d out{ax.tp_r.get(), ax.tp_c.get(), {}, "layer 0 attn o"};
  const int64_t Ql = Q / G, Kl = K / G, QKVl = QKV / G;
  const AttentionDims local{B, T, T, H / G, KV / G, D, QKVl, QKVl, Ql};
  std::vector<float> l(N * dl), rl(N), lf(N * d / R), q(N * QKVl), a(N * Ql), lsel(B * (H / G) * T),
      af(N * Q / C), y(N * dl);
  const size_t mark = test::ledger_mark(tp);
  tp2d::rmsnorm2d_forward(l.data(), rl.data(), x.data(), wn.data(), N, dl, d, eps, tp, "layer 0 ln1");
  tp2d::linear2d_forward(q.data(), lf.data(), test::scratch(), l.data(), wqkv.data(), N, d / R, QKV / C, in);
  attention_forward(a.data(), lsel.data(), q.data(), q.data() + Ql, q.data() + Ql + Kl, pos.data(),
                    pos.data(), local);
  tp2d::linear2d_forward(y.data(), af.data(), test::scratch(), a.data(), wo.data(), N, Q / C, d / R, out);
  for (size_t i = 0; i < y.size(); ++i)
    y[i] += x[i];
  const size_t mid = test::ledger_mark(tp);
  std::vector<float> da(N * Ql), dq(N * QKVl), dl_(N * dl), dx(N * dl), dwn(dl), dwqkv(wqkv.size()),
      dwo(wo.size());
  tp2d::linear2d_backward(da.data(), dwo.data(), test::scratch(), dy.data(), af.data(), wo.data(), N, Q / C,
                          d / R, out);
  attention_backward(dq.data(), dq.data() + Ql, dq.data() + Ql + Kl, da.data(), a.data(), lsel.data(),
                     q.data(), q.data() + Ql, q.data() + Ql + Kl, pos.data(), pos.data(), local);
  tp2d::linear2d_backward(dl_.data(), dwqkv.data(), test::scratch(), dq.data(), lf.data(), wqkv.data(), N,
                          d / R, QKV / C, in);
  tp2d::rmsnorm2d_backward(dx.data(), dwn.data(), dl_.data(), x.data(), wn.data(), rl.data(), N, dl, d, tp,
                           "layer 0 ln1");
  for (size_t i = 0; i < dx.size(); ++i)
    dx[i] += dy[i];

  // Each piece against the one-process run's, within layout_tol of that
  // run's own distance from double on the same piece (K: the longest sum, d).
  const auto check = [&](const std::vector<float>& got, const std::vector<float>& one,
                         const std::vector<double>& exact, const char* what) {
    EXPECT_LT(test::rel_err(got, test::to_double(one)), testing::layout_tol(test::rel_err(one, exact), d))
        << what;
  };
  check(y, cols_of(Y, N, d, {d}, R, r, C, c), cols_of(YD, N, d, {d}, R, r, C, c), "y");
  // This rank's heads, as q|k|v: block c·R + r of each of q, k, v.
  check(q, cols_of(qkv, N, QKV, {Q, K, K}, C, c, R, r), cols_of(qkvD, N, QKV, {Q, K, K}, C, c, R, r), "qkv");
  check(dx, cols_of(dX, N, d, {d}, R, r, C, c), cols_of(dXD, N, d, {d}, R, r, C, c), "dx");
  check(dwn, cols_of(dWn, 1, d, {d}, R, r, C, c), cols_of(dWnD, 1, d, {d}, R, r, C, c), "dwn");
  check(dwqkv, block2d(dWqkv, d, {Q, K, K}, C, c, R, r), block2d(dWqkvD, d, {Q, K, K}, C, c, R, r), "dwqkv");
  check(dwo, block2d(dWo, Q, {d}, R, r, C, c), block2d(dWoD, Q, {d}, R, r, C, c), "dwo");
  expect_ledger(tp, mark, mid,
                {{"all_reduce", "tp", N},
                 {"all_gather", "tp_c", N * dl},
                 {"reduce_scatter", "tp_r", N * QKV / C},
                 {"all_gather", "tp_r", N * Ql},
                 {"reduce_scatter", "tp_c", N * d / R}},
                C);
  expect_ledger(tp, mid, test::ledger_mark(tp),
                {{"all_gather", "tp_c", N * dl},
                 {"reduce_scatter", "tp_r", N * Q / C},
                 {"all_gather", "tp_r", N * QKVl},
                 {"reduce_scatter", "tp_c", N * d / R},
                 {"all_reduce", "tp", N}},
                C);
}

}  // namespace
}  // namespace mt

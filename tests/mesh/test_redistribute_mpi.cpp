// redistribute under mpirun, against pieces cut from a single-process
// reference by this file's own slicing, and against the comm ledger: one
// collective of the expected kind per change of placement.
#include <gtest/gtest.h>

#include <functional>

#include "comm/context.h"
#include "mesh/mesh.h"
#include "mesh/redistribute.h"
#include "mpi_world.h"

namespace mt {
namespace {

// A row-major 2-D matrix.
struct Mat {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
  Mat(int64_t r, int64_t c, float fill = 0) : rows(r), cols(c), v(static_cast<size_t>(r * c), fill) {}
  float& at(int64_t i, int64_t j) { return v[static_cast<size_t>(i * cols + j)]; }
  float at(int64_t i, int64_t j) const { return v[static_cast<size_t>(i * cols + j)]; }
};

// The reference tensor; integers, so every sum is exact in any order.
Mat global(int64_t rows, int64_t cols) {
  Mat g(rows, cols);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      g.at(i, j) = static_cast<float>(100 * i + j + 1);
  return g;
}

// Addend `t` of `k` whose sum is g (Partial placement).
Mat addend(const Mat& g, int t, int k) {
  Mat a(g.rows, g.cols);
  for (int64_t i = 0; i < g.rows; ++i)
    for (int64_t j = 0; j < g.cols; ++j) {
      float others = 0;
      for (int u = 1; u < k; ++u)
        others += static_cast<float>(7 * u + i - 3 * j);
      a.at(i, j) = t == 0 ? g.at(i, j) - others : static_cast<float>(7 * t + i - 3 * j);
    }
  return a;
}

// Piece t of k along `dim`: ceil(n/k) rows (or columns), pad past the end.
Mat cut(const Mat& m, int dim, int t, int k, float pad) {
  const int64_t n = dim == 0 ? m.rows : m.cols, c = (n + k - 1) / k;
  Mat out(dim == 0 ? c : m.rows, dim == 0 ? m.cols : c, pad);
  for (int64_t i = 0; i < out.rows; ++i)
    for (int64_t j = 0; j < out.cols; ++j) {
      const int64_t gi = dim == 0 ? t * c + i : i, gj = dim == 1 ? t * c + j : j;
      if (gi < m.rows && gj < m.cols) out.at(i, j) = m.at(gi, gj);
    }
  return out;
}

// This rank's piece of g under `p` on an axis where it has coordinate t of k.
Mat piece(const Mat& g, const Placement& p, int t, int k, float pad) {
  if (p.is_partial()) return addend(g, t, k);
  if (p.is_shard()) return cut(g, p.dim(), t, k, pad);
  return g;
}

const Placement R = Placement::replicate(), P = Placement::partial();
Placement S(int d) {
  return Placement::shard(d);
}

struct Case {
  Placement from, to;
  const char* op;  // the one collective expected in the ledger; nullptr: none
};

// Over tp on (dp world/tp × tp), for tp 2 and 4 and two uneven shapes.
TEST(Redistribute, EveryChangeOverTpMatchesTheReference) {
  const int world = test::world().size();
  const std::vector<Case> cases = {
      {P, R, "all_reduce"},
      {P, S(0), "reduce_scatter"},
      {P, S(1), "reduce_scatter"},
      {S(0), R, "all_gather"},
      {S(1), R, "all_gather"},
      {S(0), S(1), "all_to_all"},
      {S(1), S(0), "all_to_all"},
      {R, S(0), nullptr},
      {R, S(1), nullptr},
      {S(1), S(1), nullptr},
      {P, P, nullptr},
  };
  for (int k : {2, 4}) {
    if (world % k != 0) continue;
    const DeviceMesh mesh(test::world(), MeshSizes{.dp = world / k, .tp = k});
    const int t = mesh.coord(Axis::tp);
    CommLedger& ledger = mesh.world().context().ledger;
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{7, 5}, {5, 3}, {8, 6}}) {
      const Mat g = global(rows, cols);
      for (const Case& c : cases) {
        const Layout from = Layout({rows, cols}).with(Axis::tp, c.from);
        const Layout to = Layout({rows, cols}).with(Axis::tp, c.to);
        const std::string what = "tp " + std::to_string(k) + " " + from.to_string() + " → " + to.to_string();
        // Padding of the input is garbage: it must never reach a real element.
        const Mat in = piece(g, c.from, t, k, -999.0f);
        // Padding the change creates is zero; a copy keeps the input's.
        const Mat want = piece(g, c.to, t, k, c.from == c.to ? -999.0f : 0.0f);
        ASSERT_EQ(static_cast<int64_t>(in.v.size()), local_numel(from, mesh.sizes())) << what;
        ASSERT_EQ(static_cast<int64_t>(want.v.size()), local_numel(to, mesh.sizes())) << what;
        std::vector<float> out(want.v.size(), 12345.0f);
        const size_t before = ledger.entries().size();
        redistribute(in.v.data(), out.data(), from, to, mesh, "test redistribute");
        EXPECT_EQ(out, want.v) << what;
        const auto& entries = ledger.entries();
        ASSERT_EQ(entries.size() - before, c.op ? 1u : 0u) << what;
        if (c.op) {
          EXPECT_EQ(entries.back().op, c.op) << what;
          EXPECT_EQ(entries.back().axis, "tp") << what;
          EXPECT_EQ(entries.back().label, "test redistribute") << what;
        }
      }
    }
  }
}

// Two axes at once on (dp × tp 2): one collective per changed axis, in order.
TEST(Redistribute, TwoAxesOneCollectiveEach) {
  const int world = test::world().size();
  const DeviceMesh mesh(test::world(), MeshSizes{.dp = world / 2, .tp = 2});
  const int t = mesh.coord(Axis::tp), d = mesh.coord(Axis::dp), kd = world / 2;
  CommLedger& ledger = mesh.world().context().ledger;
  const Mat g = global(9, 7);

  // dp S(0) × tp S(1) → Replicate: all_gather over tp, then over dp.
  const Layout both = Layout({9, 7}).with(Axis::dp, S(0)).with(Axis::tp, S(1));
  const Mat in = cut(cut(g, 0, d, kd, 0.0f), 1, t, 2, 0.0f);
  std::vector<float> out(static_cast<size_t>(9 * 7));
  size_t before = ledger.entries().size();
  redistribute(in.v.data(), out.data(), both, Layout({9, 7}), mesh, "two axes");
  EXPECT_EQ(out, g.v);
  ASSERT_EQ(ledger.entries().size() - before, 2u);
  EXPECT_EQ(ledger.entries()[before].axis, "tp");
  EXPECT_EQ(ledger.entries()[before + 1].axis, "dp");
  EXPECT_EQ(ledger.entries()[before + 1].op, "all_gather");

  // A TP-sharded gradient, partial over dp → also sharded over dp along dim 1
  // (ZeRO-2 on a column-parallel weight): one reduce_scatter over dp.
  const Layout grad = Layout({9, 7}).with(Axis::dp, P).with(Axis::tp, S(0));
  const Layout zero = grad.with(Axis::dp, S(1));
  const Mat gin = cut(addend(g, d, kd), 0, t, 2, 0.0f);
  const Mat want = cut(cut(g, 0, t, 2, 0.0f), 1, d, kd, 0.0f);
  ASSERT_EQ(static_cast<int64_t>(want.v.size()), local_numel(zero, mesh.sizes()));
  std::vector<float> gout(want.v.size());
  before = ledger.entries().size();
  redistribute(gin.v.data(), gout.data(), grad, zero, mesh, "zero2");
  EXPECT_EQ(gout, want.v);
  ASSERT_EQ(ledger.entries().size() - before, 1u);
  EXPECT_EQ(ledger.entries().back().op, "reduce_scatter");
  EXPECT_EQ(ledger.entries().back().axis, "dp");
}

}  // namespace
}  // namespace mt

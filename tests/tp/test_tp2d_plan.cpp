// The parameter table's 2-D split (parallel/tp_plan.h tp2d_slice and the
// block map of for_each_run) against docs/PARALLELISM.md "2-D tensor
// parallelism": hand-derived pieces of small tensors on a 2 × 2 grid, local
// shapes per the doc's layout table, and, on several grids, that the pieces of
// all ranks tile every tensor exactly once.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "mesh/layout.h"
#include "parallel/tp_plan.h"

namespace mt {
namespace {

using tp::Role;

// Rank's piece of a tensor of shape `g`: the global element index of each
// local element, in local order, −1 for padding. Elements [first, first + n)
// only when n ≥ 0.
std::vector<int64_t> piece(Role role, const std::vector<int64_t>& g, tp2d::Grid grid, int rank,
                           int64_t first = 0, int64_t n = -1) {
  const tp::TpSlice s = tp::tp2d_slice(role, g, grid, rank);
  const std::vector<int64_t> local = s.local_shape(g);
  const int64_t cols = local.size() > 1 ? local[1] : 1, gcols = g.size() > 1 ? g[1] : 1;
  const int64_t numel = local[0] * cols;
  if (n < 0) n = numel;
  std::vector<int64_t> m(static_cast<size_t>(n), -1);
  tp::for_each_run(s, cols, gcols, numel, first, n, [&](int64_t li, int64_t gi, int64_t len) {
    for (int64_t k = 0; k < len; ++k)
      m.at(static_cast<size_t>(li - first + k)) = gi + k;
  });
  return m;
}

using Map = std::vector<int64_t>;

TEST(Tp2dPlan, HandDerivedPiecesOnTwoByTwo) {
  const tp2d::Grid g{2, 2};  // rank t at (r, c) = (t / 2, t % 2)
  // o_proj [4, 4] (row): out block r over tp_r, in block c over tp_c; rank 2 = (1, 0).
  EXPECT_EQ(piece(Role::row, {4, 4}, g, 2), (Map{8, 9, 12, 13}));
  // q_proj [4, 6] (column): out block c over tp_c, in block r over tp_r; rank 1 = (0, 1).
  EXPECT_EQ(piece(Role::column, {4, 6}, g, 1), (Map{12, 13, 14, 18, 19, 20}));
  EXPECT_EQ(piece(Role::kv_replicated, {4, 6}, g, 3), (Map{15, 16, 17, 21, 22, 23}));
  // embed_tokens [5, 4] (vocab): ceil(5/2) = 3 rows per tp_c rank, rank 1's
  // are rows 3, 4 and one padding row; columns 0, 1 (r = 0).
  EXPECT_EQ(piece(Role::vocab, {5, 4}, g, 1), (Map{12, 13, 16, 17, -1, -1}));
  EXPECT_EQ(piece(Role::vocab, {5, 4}, g, 2), (Map{2, 3, 6, 7, 10, 11}));
  // A norm weight [8]: feature block t of 4.
  EXPECT_EQ(piece(Role::replicated, {8}, g, 3), (Map{6, 7}));
  // Part of a piece (initialisation and checkpoints ask for ranges).
  EXPECT_EQ(piece(Role::column, {4, 6}, g, 1, 2, 3), (Map{14, 18, 19}));
  EXPECT_EQ(piece(Role::vocab, {5, 4}, g, 1, 3, 3), (Map{17, -1, -1}));
}

TEST(Tp2dPlan, LocalShapesAreTheDocsTable) {
  const int64_t d = 24, Q = 12, F = 36, V = 11;
  for (const tp2d::Grid g : {tp2d::Grid{2, 1}, tp2d::Grid{2, 2}, tp2d::Grid{2, 3}, tp2d::Grid{4, 2}}) {
    const int64_t R = g.rows, C = g.cols;
    for (int t = 0; t < R * C; ++t) {
      auto shape = [&](Role role, std::vector<int64_t> full) {
        return tp::tp2d_slice(role, full, g, t).local_shape(full);
      };
      EXPECT_EQ(shape(Role::column, {Q, d}), (std::vector<int64_t>{Q / C, d / R}));
      EXPECT_EQ(shape(Role::column, {F, d}), (std::vector<int64_t>{F / C, d / R}));
      EXPECT_EQ(shape(Role::row, {d, F}), (std::vector<int64_t>{d / R, F / C}));
      EXPECT_EQ(shape(Role::vocab, {V, d}), (std::vector<int64_t>{(V + C - 1) / C, d / R}));
      EXPECT_EQ(shape(Role::replicated, {d}), (std::vector<int64_t>{d / (R * C)}));
    }
  }
}

TEST(Tp2dPlan, PiecesTileEveryTensorOnce) {
  struct Case {
    Role role;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {{Role::column, {12, 24}}, {Role::kv_replicated, {6, 24}},
                                   {Role::row, {24, 12}},    {Role::vocab, {11, 24}},
                                   {Role::vocab, {3, 24}},   {Role::replicated, {24}}};
  for (const tp2d::Grid g : {tp2d::Grid{2, 1}, tp2d::Grid{2, 2}, tp2d::Grid{2, 3}, tp2d::Grid{4, 2}}) {
    for (const Case& k : cases) {
      const int64_t numel = k.shape[0] * (k.shape.size() > 1 ? k.shape[1] : 1);
      std::vector<int> seen(static_cast<size_t>(numel), 0);
      for (int t = 0; t < g.rows * g.cols; ++t) {
        for (int64_t gi : piece(k.role, k.shape, g, t))
          if (gi >= 0) ++seen.at(static_cast<size_t>(gi));
      }
      for (int64_t i = 0; i < numel; ++i)
        ASSERT_EQ(seen[static_cast<size_t>(i)], 1)
            << tp::role_name(k.role) << " element " << i << " on " << g.rows << " x " << g.cols;
    }
  }
}

// The same pieces as a Layout (tp2d_layout: what saves, checkpoints and
// --explain read): copy_to_local of the full tensor at tp coordinate t is the
// parameter table's piece, padding zero, on every grid and role.
TEST(Tp2dPlan, LayoutHoldsThePlansPieces) {
  const std::vector<std::pair<Role, std::vector<int64_t>>> cases = {
      {Role::column, {12, 24}}, {Role::kv_replicated, {6, 24}}, {Role::row, {24, 12}},
      {Role::vocab, {11, 24}},  {Role::vocab, {3, 24}},         {Role::replicated, {24}}};
  for (const tp2d::Grid g : {tp2d::Grid{2, 1}, tp2d::Grid{2, 2}, tp2d::Grid{2, 3}, tp2d::Grid{4, 2}}) {
    const MeshSizes sizes{.tp = static_cast<int>(g.rows * g.cols)};
    for (const auto& [role, shape] : cases) {
      const Layout l = tp::tp2d_layout(role, shape, g);
      const int64_t numel = shape[0] * (shape.size() > 1 ? shape[1] : 1);
      std::vector<float> full(static_cast<size_t>(numel));
      for (int64_t i = 0; i < numel; ++i)
        full[static_cast<size_t>(i)] = static_cast<float>(i + 1);
      for (int t = 0; t < sizes.tp; ++t) {
        MeshCoords at{};
        at[static_cast<size_t>(axis_index(Axis::tp))] = t;
        EXPECT_EQ(local_shape(l, sizes), tp::tp2d_slice(role, shape, g, t).local_shape(shape))
            << l.to_string();
        std::vector<float> local(static_cast<size_t>(local_numel(l, sizes)), -7.0f);
        copy_to_local(l, sizes, at, full.data(), local.data());
        std::vector<float> want;
        for (int64_t gi : piece(role, shape, g, t))
          want.push_back(gi < 0 ? 0.0f : static_cast<float>(gi + 1));
        EXPECT_EQ(local, want) << l.to_string() << " rank " << t;
      }
    }
  }
}

// ZeRO over a 2-D piece: dim 0 of each tp piece split again over dp, after
// both sub-axes (hand-derived), and the pieces of every (dp, tp) rank rebuild
// the tensor through copy_to_full.
TEST(Tp2dPlan, ZeroShardsTheTwoDPiece) {
  const tp2d::Grid g{2, 2};
  const MeshSizes sizes{.dp = 2, .tp = 4};
  // o_proj [4, 4] (row): tp rank 2 = (r 1, c 0) holds rows 2, 3 and columns
  // 0, 1; dp shard 1 of its 2 rows is row 3: elements 12, 13.
  const Layout z = zero_layout(tp::tp2d_layout(Role::row, {4, 4}, g), axis_bit(Axis::dp));
  EXPECT_EQ(z.to_string(), "[4, 4] dp:S(0) tp:S(1)/c+S(0)/r(2 rows) order tp,dp");
  MeshCoords at{};
  at[static_cast<size_t>(axis_index(Axis::tp))] = 2;
  at[static_cast<size_t>(axis_index(Axis::dp))] = 1;
  std::vector<float> full(16);
  for (int i = 0; i < 16; ++i)
    full[static_cast<size_t>(i)] = static_cast<float>(i);
  std::vector<float> local(static_cast<size_t>(local_numel(z, sizes)));
  copy_to_local(z, sizes, at, full.data(), local.data());
  EXPECT_EQ(local, (std::vector<float>{12, 13}));

  const Layout v = zero_layout(tp::tp2d_layout(Role::vocab, {11, 6}, tp2d::Grid{2, 3}), axis_bit(Axis::dp));
  const MeshSizes s6{.dp = 2, .tp = 6};
  std::vector<float> src(66), back(66, -1.0f);
  for (int i = 0; i < 66; ++i)
    src[static_cast<size_t>(i)] = static_cast<float>(i);
  for (int d = 0; d < 2; ++d) {
    for (int t = 0; t < 6; ++t) {
      MeshCoords c{};
      c[static_cast<size_t>(axis_index(Axis::tp))] = t;
      c[static_cast<size_t>(axis_index(Axis::dp))] = d;
      std::vector<float> piece_of(static_cast<size_t>(local_numel(v, s6)));
      copy_to_local(v, s6, c, src.data(), piece_of.data());
      copy_to_full(v, s6, c, piece_of.data(), back.data());
      EXPECT_TRUE(first_holder(v, c));  // no tp rank repeats another's piece
    }
  }
  EXPECT_EQ(back, src);
}

TEST(Tp2dPlan, RefusesWhatHasNoTwoDSplit) {
  auto message = [](auto&& f) {
    try {
      f();
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no ConfigError");
  };
  const tp2d::Grid g{2, 2};
  EXPECT_NE(message([&] {
              tp::tp2d_slice(Role::column, {5, 8}, g, 0);
            }).find("output features (5) must be divisible by tp_c (2)"),
            std::string::npos);
  EXPECT_NE(message([&] {
              tp::tp2d_slice(Role::row, {8, 6}, tp2d::Grid{2, 4}, 0);
            }).find("input features (6) must be divisible by tp_c (4)"),
            std::string::npos);
  EXPECT_NE(message([&] {
              tp::tp2d_slice(Role::replicated, {4, 4}, g, 0);
            }).find("has no split on a 2-D"),
            std::string::npos);
  EXPECT_NE(message([&] {
              tp::tp2d_slice(Role::column, {4, 4}, tp2d::Grid{1, 4}, 0);
            }).find("outside a 2-D tp grid of 1 x 4"),
            std::string::npos);
}

}  // namespace
}  // namespace mt

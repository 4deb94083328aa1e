// Pure layout tests: placements, the padded shard convention, local shapes
// and ranges, ZeRO over TP.
#include <gtest/gtest.h>

#include "core/error.h"
#include "mesh/layout.h"

namespace mt {
namespace {

using Range = std::pair<int64_t, int64_t>;
const Placement R = Placement::replicate();
const Placement P = Placement::partial();
Placement S(int d) {
  return Placement::shard(d);
}

TEST(Placement, Names) {
  EXPECT_EQ(R.to_string(), "R");
  EXPECT_EQ(S(0).to_string(), "S(0)");
  EXPECT_EQ(S(1).to_string(), "S(1)");
  EXPECT_EQ(P.to_string(), "P");
  EXPECT_EQ(Placement(), R);
  EXPECT_NE(S(0), S(1));
  EXPECT_TRUE(S(1).is_shard(1));
  EXPECT_FALSE(S(1).is_shard(0));
}

TEST(ShardRange, EvenAndUneven) {
  EXPECT_EQ(padded_shard_size(8, 4), 2);
  EXPECT_EQ(shard_range(8, 4, 3), Range(6, 8));
  // 5 rows over 4 shards: 2 rows each; [0,2) [2,4) [4,5)+pad, all pad.
  EXPECT_EQ(padded_shard_size(5, 4), 2);
  EXPECT_EQ(shard_range(5, 4, 0), Range(0, 2));
  EXPECT_EQ(shard_range(5, 4, 1), Range(2, 4));
  EXPECT_EQ(shard_range(5, 4, 2), Range(4, 5));
  EXPECT_EQ(shard_range(5, 4, 3), Range(5, 5));
  // 7 over 3: 3 each; [0,3) [3,6) [6,7).
  EXPECT_EQ(padded_shard_size(7, 3), 3);
  EXPECT_EQ(shard_range(7, 3, 2), Range(6, 7));
  EXPECT_EQ(padded_shard_size(0, 3), 0);
  EXPECT_EQ(shard_range(0, 3, 1), Range(0, 0));
  EXPECT_EQ(shard_range(3, 1, 0), Range(0, 3));
}

// ZeRO over TP: tp cuts a [10, 4] column weight into pieces of 5 rows, then
// dp × cp = 4 (one flattened axis, rounding up once) shards each piece's rows:
// ceil(5 / 4) = 2 rows a rank, the rule of UnitShards (shard_range(5, 4, i)).
// Axis by axis (dp, then cp, then tp) would give other rows.
TEST(Layout, ZeroOverTpShardsEachTpPieceOverTheFlattenedGroup) {
  const MeshSizes sizes{.dp = 2, .cp = 2, .tp = 2};
  const Layout tp_col = Layout({10, 4}).with(Axis::tp, S(0));
  const Layout z = zero_layout(tp_col, axis_bit(Axis::dp) | axis_bit(Axis::cp));
  EXPECT_EQ(z.to_string(), "[10, 4] dp:S(0) cp:S(0) tp:S(0) order tp,dp+cp");
  EXPECT_EQ(local_shape(z, sizes), (std::vector<int64_t>{2, 4}));
  for (int t = 0; t < 2; ++t)
    for (int d = 0; d < 2; ++d)
      for (int c = 0; c < 2; ++c) {
        MeshCoords at{};
        at[static_cast<size_t>(axis_index(Axis::tp))] = t;
        at[static_cast<size_t>(axis_index(Axis::dp))] = d;
        at[static_cast<size_t>(axis_index(Axis::cp))] = c;
        const auto [b, e] = shard_range(5, 4, d * 2 + c);
        EXPECT_EQ(local_range(z, 0, sizes, at), Range(5 * t + b, 5 * t + e));
      }
  // The default order would let dp split first: rank (dp 1, cp 0, tp 0) gets rows [5, 7), not [4, 5).
  Layout by_axis = z;
  by_axis.order.clear();
  MeshCoords at{};
  at[static_cast<size_t>(axis_index(Axis::dp))] = 1;
  EXPECT_EQ(local_range(by_axis, 0, sizes, at), Range(5, 7));
  EXPECT_EQ(local_range(z, 0, sizes, at), Range(4, 5));
  Layout bad = tp_col;
  bad.order = {axis_bit(Axis::dp)};
  EXPECT_THROW(bad.validate(), ConfigError);
}

TEST(Layout, LocalShapeAndRange) {
  const MeshSizes sizes{.dp = 2, .tp = 4};
  const Layout col = Layout({7, 5}).with(Axis::tp, S(1));
  EXPECT_EQ(local_shape(col, sizes), (std::vector<int64_t>{7, 2}));
  EXPECT_EQ(local_numel(col, sizes), 14);
  EXPECT_EQ(local_range(col, 1, sizes, {0, 0, 0, 2}), Range(4, 5));
  EXPECT_EQ(local_range(col, 0, sizes, {0, 1, 0, 2}), Range(0, 7));
  // dp and tp both shard dim 0: dp splits 7 into 4+pad, tp splits 4 into 1s.
  const Layout both = Layout({7, 5}).with(Axis::dp, S(0)).with(Axis::tp, S(0));
  EXPECT_EQ(local_shape(both, sizes), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(local_range(both, 0, sizes, {0, 1, 0, 2}), Range(6, 7));
  EXPECT_EQ(local_range(both, 0, sizes, {0, 1, 0, 3}), Range(7, 7));
  EXPECT_EQ(local_range(both, 0, sizes, {0, 0, 0, 3}), Range(3, 4));
  EXPECT_EQ(Layout({7, 5}).with(Axis::tp, P).to_string(), "[7, 5] tp:P");
  EXPECT_EQ(Layout({3}).to_string(), "[3] R");
  EXPECT_THROW(Layout({3}).with(Axis::tp, S(1)).validate(), ConfigError);
}

// The one writer of each piece: coordinate 0 where the layout replicates, the
// first of each group of replicas on a sharded axis, any pp coordinate.
TEST(Layout, FirstHolderIsTheLowestRankHoldingThePiece) {
  const Layout norm({8});  // replicated everywhere
  EXPECT_TRUE(first_holder(norm, {0, 0, 0, 0}));
  EXPECT_TRUE(first_holder(norm, {1, 0, 0, 0}));   // pp 1 holds its own stage's norm
  EXPECT_FALSE(first_holder(norm, {0, 1, 0, 0}));  // dp 1 holds a copy
  EXPECT_FALSE(first_holder(norm, {0, 0, 0, 1}));  // tp 1 holds a copy
  Layout kv = Layout({8, 6}).with(Axis::tp, S(0));
  kv.replicas[static_cast<size_t>(axis_index(Axis::tp))] = 2;  // tp ranks 0-1 hold head 0, 2-3 head 1
  EXPECT_TRUE(first_holder(kv, {0, 0, 0, 2}));
  EXPECT_FALSE(first_holder(kv, {0, 0, 0, 3}));
  const Layout zero = Layout({8, 6}).with(Axis::dp, S(0));
  EXPECT_TRUE(first_holder(zero, {0, 1, 0, 0}));   // every dp rank holds its own shard
  EXPECT_FALSE(first_holder(zero, {0, 1, 1, 0}));  // replicated over cp
}

// An expert under expert parallelism (docs/PARALLELISM.md "Expert
// parallelism"): dp 2 × cp 2 flattened to f = 2·dp + cp, ep 2, held by the
// ranks with f mod 2 = 1 (f = 1 and 3); its writer is f = 1 (dp 0, cp 1).
TEST(Layout, FirstHolderOfAnExpertIsTheLowestRankOfItsEpCoordinate) {
  Layout w({6, 4});
  w.ep = 2;
  w.expert_coord = 1;
  w.ep_cp_size = 2;
  EXPECT_TRUE(first_holder(w, {0, 0, 1, 0}));   // f = 1
  EXPECT_TRUE(first_holder(w, {1, 0, 1, 0}));   // pp 1 holds its own stage's experts
  EXPECT_FALSE(first_holder(w, {0, 1, 1, 0}));  // f = 3: a copy
  EXPECT_FALSE(first_holder(w, {0, 0, 0, 0}));  // f = 0: holds the other experts
  EXPECT_FALSE(first_holder(w, {0, 0, 1, 1}));  // tp 1 holds a copy
  EXPECT_EQ(w.to_string(), "[6, 4] R ep:1/2");
}

}  // namespace
}  // namespace mt

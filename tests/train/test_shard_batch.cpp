// shard_batch: the one place a batch is split between ranks. Golden values by
// hand from the rules: dp replica r takes rows [r·B/dp, (r+1)·B/dp); cp rank
// c of cp takes chunks c and 2·cp−1−c of each sequence cut into 2·cp chunks.
#include <gtest/gtest.h>

#include <vector>

#include "train/train_step.h"

namespace mt {
namespace {

// Token (row b, position t) = 100·b + t; target = that + 1000.
Batch numbered(int64_t B, int64_t T) {
  Batch g{B, T, {}, {}};
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      g.inputs.push_back(static_cast<int32_t>(100 * b + t));
      g.targets.push_back(static_cast<int32_t>(100 * b + t + 1000));
    }
  }
  return g;
}

TEST(ShardBatch, TakesThisReplicasRowsAndThisCpRanksZigzagShare) {
  RunMesh m;
  m.dp = 2;
  m.dp_rank = 1;
  m.cp = 2;
  m.cp_rank = 1;
  const Batch s = shard_batch(m, numbered(4, 8), RowSplit::dp);
  EXPECT_EQ(s.rows, 2);
  EXPECT_EQ(s.T, 4);
  // Rows 2 and 3; chunks of 2 positions, cp rank 1 holds chunks 1 and 2: positions 2, 3, 4, 5.
  const std::vector<int32_t> want = {202, 203, 204, 205, 302, 303, 304, 305};
  EXPECT_EQ(s.inputs, want);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(s.targets[i], want[i] + 1000);
}

TEST(ShardBatch, EvaluationKeepsEveryRowOnEveryReplica) {
  RunMesh m;
  m.dp = 2;
  m.dp_rank = 1;
  m.cp = 2;
  m.cp_rank = 0;
  const Batch s = shard_batch(m, numbered(2, 8), RowSplit::none);
  EXPECT_EQ(s.rows, 2);
  // cp rank 0 holds chunks 0 and 3: positions 0, 1, 6, 7.
  const std::vector<int32_t> want = {0, 1, 6, 7, 100, 101, 106, 107};
  EXPECT_EQ(s.inputs, want);
}

TEST(ShardBatch, OneRankGetsTheWholeBatch) {
  const Batch g = numbered(3, 4);
  const Batch s = shard_batch(RunMesh{}, g, RowSplit::dp);
  EXPECT_EQ(s.inputs, g.inputs);
  EXPECT_EQ(s.targets, g.targets);
}

}  // namespace
}  // namespace mt

// The hierarchical all-reduce (parallel/dp_allreduce.h) on nodes made up for
// the test: the process's context is told that world rank r sits on node
// nodes[r] (as the runtime tells it what MPI reports), so one machine's ranks
// play 2 nodes × 2 ranks. The sums are checked against values worked out
// here (small integers, exact in fp32), the canonical tree bitwise against
// the flat all-reduce by the same tree, and the ledger's calls and links.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "comm/context.h"
#include "comm/mpi_test.h"
#include "comm/nodes.h"
#include "core/error.h"
#include "parallel/dp_allreduce.h"

namespace mt {
namespace {

using test::world;

// Sets the context's nodes for the test's duration; the real ones come back after.
class FakeNodes {
 public:
  explicit FakeNodes(std::vector<int> nodes) : saved_(world().context().node_of_world_rank) {
    world().context().node_of_world_rank = std::move(nodes);
  }
  ~FakeNodes() { world().context().node_of_world_rank = saved_; }

 private:
  std::vector<int> saved_;
};

bool four_ranks() {
  return world().size() == 4;
}

TEST(DpHierarchical, SplitsAtTheNodesWithTheirLinks) {
  if (!four_ranks()) GTEST_SKIP() << "needs 4 ranks";
  FakeNodes fake({0, 0, 1, 1});
  NodeSplit s = split_by_node(world());
  const int me = world().rank();
  EXPECT_EQ(s.node.size(), 2);
  EXPECT_EQ(s.node.rank(), me % 2);
  EXPECT_EQ(s.across.size(), 2);
  EXPECT_EQ(s.across.rank(), me / 2);
  EXPECT_EQ(s.node.axis(), world().axis() + "@node");
  EXPECT_EQ(s.node_ranks, (std::vector<int>{2, 2}));
  EXPECT_EQ(s.node.link(), "node");
  EXPECT_EQ(s.across.link(), "across");
  EXPECT_EQ(world().link(), "across");
}

// Rank r's element i: r·1000 + i, so the sum over P ranks is 1000·P(P−1)/2 + P·i.
std::vector<float> bucket(int n, int r) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<float>(r * 1000 + i);
  return v;
}

TEST(DpHierarchical, SumsEveryBucketWhateverTheOrderRanksPollIn) {
  if (!four_ranks()) GTEST_SKIP() << "needs 4 ranks";
  FakeNodes fake({0, 0, 1, 1});
  NodeSplit s = split_by_node(world());
  const int me = world().rank(), P = 4;
  // 1 (all tail: m = 0), 7 (a tail of 1), 8 (none), 301.
  const std::vector<int> sizes = {1, 7, 8, 301};
  std::vector<std::vector<float>> bufs, shards;
  CommLedger& ledger = world().context().ledger;
  ledger.clear();
  HierarchicalAllReduces h(world(), s, SumOrder::library);
  for (size_t k = 0; k < sizes.size(); ++k) {
    bufs.push_back(bucket(sizes[k], me));
    shards.emplace_back(static_cast<size_t>(HierarchicalAllReduces::shard_numel(sizes[k], 2)));
    h.add(bufs.back().data(), sizes[k], shards.back().data(), "bucket " + std::to_string(k));
    // Odd ranks poll the last bucket first and late: the launches still meet.
    if (me % 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      h.test(k);
    }
  }
  if (me % 2 == 0)
    for (size_t k = sizes.size(); k-- > 0;)
      h.test(k);
  h.wait_all();
  for (size_t k = 0; k < sizes.size(); ++k)
    for (int i = 0; i < sizes[k]; ++i)
      EXPECT_EQ(bufs[k][static_cast<size_t>(i)], 1000.0f * 6 + static_cast<float>(P * i)) << k << " " << i;
  int64_t rs = 0, across = 0, ag = 0, tail = 0;
  for (const LedgerEntry& e : ledger.entries()) {
    if (e.op == "reduce_scatter" && e.link == "node") rs += e.elements;
    if (e.op == "all_reduce" && e.axis == s.across.axis() && e.link == "across") across += e.elements;
    if (e.op == "all_gather" && e.link == "node") ag += e.elements;
    if (e.op == "all_reduce" && e.axis == world().axis()) tail += e.elements;
  }
  EXPECT_EQ(rs, 2 * (0 + 3 + 4 + 150));  // reduce_scatter counts P·m
  EXPECT_EQ(across, 0 + 3 + 4 + 150);    // each bucket's shard crosses, 1/g of it
  EXPECT_EQ(ag, 0 + 3 + 4 + 150);
  EXPECT_EQ(tail, 1 + 1 + 0 + 1);
}

// Random values (inexact sums): hierarchical by the tree is the flat tree, bit for bit.
TEST(DpHierarchical, TheCanonicalTreeIsTheFlatTree) {
  if (!four_ranks()) GTEST_SKIP() << "needs 4 ranks";
  FakeNodes fake({0, 0, 1, 1});
  NodeSplit s = split_by_node(world());
  check_canonical_nodes(s, "world");  // aligned pairs: allowed
  const int me = world().rank(), n = 1001;
  std::vector<float> a(n), shard(static_cast<size_t>(HierarchicalAllReduces::shard_numel(n, 2)));
  uint32_t x = 12345u + 977u * static_cast<uint32_t>(me);
  for (float& v : a) {
    x = x * 1664525u + 1013904223u;
    v = std::ldexp(static_cast<float>(x >> 8), -20) - 8.0f;
  }
  std::vector<float> flat = a;
  world().all_reduce(flat.data(), n, ElemType::f32, SumOrder::tree, "flat tree");
  HierarchicalAllReduces h(world(), s, SumOrder::tree);
  h.add(a.data(), n, shard.data(), "hierarchical tree");
  h.wait_all();
  int differ = 0;
  for (int i = 0; i < n; ++i)
    differ += a[static_cast<size_t>(i)] != flat[static_cast<size_t>(i)];
  EXPECT_EQ(differ, 0);
  // And the library order may differ from it, which is why the tree is needed.
}

TEST(DpHierarchical, UnevenNodesAreRefusedByName) {
  if (!four_ranks()) GTEST_SKIP() << "needs 4 ranks";
  FakeNodes fake({0, 0, 0, 1});
  try {
    split_by_node(world());
    ADD_FAILURE() << "an uneven split was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("(3, 1 ranks per node)"), std::string::npos) << e.what();
  }
}

TEST(DpHierarchical, TheCanonicalModeNeedsAlignedBlocks) {
  if (!four_ranks()) GTEST_SKIP() << "needs 4 ranks";
  FakeNodes fake({0, 1, 0, 1});  // ranks dealt round robin: node 0 holds 0 and 2
  NodeSplit s = split_by_node(world());
  EXPECT_THROW(check_canonical_nodes(s, "dp"), ConfigError);
}

}  // namespace
}  // namespace mt

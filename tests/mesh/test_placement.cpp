// Placement (mesh/placement.h): positions node by node, and the node part of
// --print-mesh, on maps written out by hand.
#include <gtest/gtest.h>

#include "core/error.h"
#include "mesh/placement.h"

namespace mt {
namespace {

TEST(Placement, NodesOrderDealsRoundRobinRanksBackIntoBlocks) {
  // mpirun --map-by node on 2 nodes: ranks 0 2 on node 0, 1 3 on node 1.
  EXPECT_EQ(mesh_positions({0, 1, 0, 1}, RankPlacement::nodes), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(mesh_positions({0, 1, 0, 1}, RankPlacement::ranks), (std::vector<int>{0, 1, 2, 3}));
  // Already in blocks, or one node: nothing moves.
  EXPECT_EQ(mesh_positions({0, 0, 1, 1}, RankPlacement::nodes), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(mesh_positions({0, 0, 0}, RankPlacement::nodes), (std::vector<int>{0, 1, 2}));
}

TEST(Placement, ParseNamesTheValue) {
  EXPECT_EQ(parse_placement("nodes"), RankPlacement::nodes);
  EXPECT_EQ(parse_placement("ranks"), RankPlacement::ranks);
  try {
    parse_placement("hosts");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'hosts'"), std::string::npos) << e.what();
  }
}

TEST(Placement, NodeTableSaysWhereEachAxisLies) {
  const MeshSizes s{.dp = 2, .tp = 2};
  const std::vector<std::string> names = {"a", "b"};
  const std::vector<int> nodes = {0, 1, 0, 1};
  const std::string placed = mesh_node_table(s, mesh_positions(nodes, RankPlacement::nodes), nodes, names);
  EXPECT_NE(placed.find("  a: mesh ranks 0 1 (mpirun's ranks 0 2)\n"), std::string::npos) << placed;
  EXPECT_NE(placed.find("TP groups: {0, 1} on a; {2, 3} on b (each inside one node)\n"), std::string::npos)
      << placed;
  EXPECT_NE(placed.find("DP groups: {0, 2} on a + b; {1, 3} on a + b (2 of 2 across nodes)\n"),
            std::string::npos)
      << placed;
  const std::string kept = mesh_node_table(s, mesh_positions(nodes, RankPlacement::ranks), nodes, names);
  EXPECT_NE(kept.find("TP groups: {0, 1} on a + b; {2, 3} on a + b (2 of 2 across nodes)\n"),
            std::string::npos)
      << kept;
  EXPECT_NE(kept.find("  a: mesh ranks 0 2\n"), std::string::npos) << kept;
}

}  // namespace
}  // namespace mt

// Placement (mesh/placement.h): positions node by node, and the node part of
// --print-mesh, on maps written out by hand.
#include <gtest/gtest.h>

#include "core/error.h"
#include "mesh/placement.h"

namespace mt {
namespace {

const RankPlacement kNodes = parse_placement("nodes");
const RankPlacement kRanks = parse_placement("ranks");

TEST(Placement, NodesOrderDealsRoundRobinRanksBackIntoBlocks) {
  const MeshSizes s4{.dp = 2, .tp = 2}, s3{.dp = 3};
  // mpirun --map-by node on 2 nodes: ranks 0 2 on node 0, 1 3 on node 1.
  EXPECT_EQ(mesh_positions({0, 1, 0, 1}, kNodes, s4), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(mesh_positions({0, 1, 0, 1}, kRanks, s4), (std::vector<int>{0, 1, 2, 3}));
  // Already in blocks, or one node: nothing moves.
  EXPECT_EQ(mesh_positions({0, 0, 1, 1}, kNodes, s4), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(mesh_positions({0, 0, 0}, kNodes, s3), (std::vector<int>{0, 1, 2}));
}

TEST(Placement, AnInnerAxisFillsTheNodeFirst) {
  // cp 2 x tp 2, position = cp·2 + tp: the cp groups are {0, 2} and {1, 3}, the tp groups {0, 1}, {2, 3}.
  // nodes:cp fills node 0 with (cp 0, tp 0) = 0 and (cp 1, tp 0) = 2, node 1 with 1 and 3.
  const MeshSizes s{.cp = 2, .tp = 2};
  EXPECT_EQ(mesh_positions({0, 0, 1, 1}, parse_placement("nodes:cp"), s), (std::vector<int>{0, 2, 1, 3}));
  // mpirun --map-by node as well: ranks 0 2 on node 0 take the node's first two positions.
  EXPECT_EQ(mesh_positions({0, 1, 0, 1}, parse_placement("nodes:cp"), s), (std::vector<int>{0, 1, 2, 3}));
  // dp 2 x cp 2 x tp 2 on 2 nodes of 4, nodes:cp+dp: k = cp + 2·dp + 4·tp, position = dp·4 + cp·2 + tp,
  // so node 0 holds the tp 0 positions {0, 2, 4, 6}: every dp x cp group (and an ep group in it) inside.
  const MeshSizes s8{.dp = 2, .cp = 2, .tp = 2};
  EXPECT_EQ(mesh_positions({0, 0, 0, 0, 1, 1, 1, 1}, parse_placement("nodes:cp+dp"), s8),
            (std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}));
  // Naming the default order changes nothing.
  EXPECT_EQ(mesh_positions({0, 0, 0, 0, 1, 1, 1, 1}, parse_placement("nodes:tp+cp"), s8),
            mesh_positions({0, 0, 0, 0, 1, 1, 1, 1}, kNodes, s8));
  EXPECT_EQ(node_order(parse_placement("nodes:dp")),
            (std::vector<Axis>{Axis::dp, Axis::tp, Axis::cp, Axis::pp}));
  EXPECT_EQ(placement_name(parse_placement("nodes:cp+dp")), "nodes:cp+dp");
}

TEST(Placement, ParseNamesTheValue) {
  EXPECT_EQ(kNodes.kind, RankPlacement::Kind::nodes);
  EXPECT_TRUE(kNodes.inner.empty());
  EXPECT_EQ(kRanks.kind, RankPlacement::Kind::ranks);
  const auto refused = [](const char* value, const std::string& want) {
    try {
      parse_placement(value);
      ADD_FAILURE() << value << ": no error";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos) << e.what();
    }
  };
  refused("hosts", "'hosts' is not a placement");
  refused("nodesx", "'nodesx' is not a placement");
  refused("nodes:ep", "names 'ep', which is not a mesh axis (tp, cp, pp, dp)");
  refused("nodes:", "names '', which is not a mesh axis");
  refused("nodes:cp+cp", "names axis cp twice");
}

TEST(Placement, NodeTableSaysWhereEachAxisLies) {
  const MeshSizes s{.dp = 2, .tp = 2};
  const std::vector<std::string> names = {"a", "b"};
  const std::vector<int> nodes = {0, 1, 0, 1};
  const std::string placed = mesh_node_table(s, mesh_positions(nodes, kNodes, s), nodes, names);
  EXPECT_NE(placed.find("  a: mesh ranks 0 1 (mpirun's ranks 0 2)\n"), std::string::npos) << placed;
  EXPECT_NE(placed.find("TP groups: {0, 1} on a; {2, 3} on b (each inside one node)\n"), std::string::npos)
      << placed;
  EXPECT_NE(placed.find("DP groups: {0, 2} on a + b; {1, 3} on a + b (2 of 2 across nodes)\n"),
            std::string::npos)
      << placed;
  const std::string kept = mesh_node_table(s, mesh_positions(nodes, kRanks, s), nodes, names);
  EXPECT_NE(kept.find("TP groups: {0, 1} on a + b; {2, 3} on a + b (2 of 2 across nodes)\n"),
            std::string::npos)
      << kept;
  EXPECT_NE(kept.find("  a: mesh ranks 0 2\n"), std::string::npos) << kept;
}

TEST(Placement, NodeTableShowsTheExpertGroups) {
  // dp 2 x tp 2 at ep 2 on 2 nodes of 2: the dp groups {0, 2}, {1, 3} are the ep groups. nodes: the tp
  // groups inside, the ep groups across; nodes:dp (k = dp + 2·tp, position = dp·2 + tp) the reverse.
  const MeshSizes s{.dp = 2, .tp = 2};
  const std::vector<std::string> names = {"a", "b"};
  const std::vector<int> nodes = {0, 0, 1, 1};
  const std::string tp_in = mesh_node_table(s, mesh_positions(nodes, kNodes, s), nodes, names, 2);
  EXPECT_NE(tp_in.find("EP groups: {0, 2} on a + b; {1, 3} on a + b (2 of 2 across nodes)\n"),
            std::string::npos)
      << tp_in;
  const std::string ep_in =
      mesh_node_table(s, mesh_positions(nodes, parse_placement("nodes:dp"), s), nodes, names, 2);
  EXPECT_NE(ep_in.find("EP groups: {0, 2} on a; {1, 3} on b (each inside one node)\n"), std::string::npos)
      << ep_in;
  EXPECT_NE(ep_in.find("TP groups: {0, 1} on a + b; {2, 3} on a + b (2 of 2 across nodes)\n"),
            std::string::npos)
      << ep_in;
  EXPECT_EQ(tp_in.find("EP groups"), tp_in.rfind("EP groups"));
  EXPECT_EQ(mesh_node_table(s, mesh_positions(nodes, kNodes, s), nodes, names).find("EP"), std::string::npos);
}

}  // namespace
}  // namespace mt

// Mesh groups under mpirun: each group's members, checked by gathering the
// world ranks inside the group.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "mesh/mesh.h"
#include "mpi_world.h"

namespace mt {
namespace {

std::vector<int> members(Group g) {
  const int me = test::world().rank();
  std::vector<int> all(static_cast<size_t>(g.size()), -1);
  g.all_gather(&me, all.data(), 1, ElemType::i32, "test members");
  return all;
}

// Every mesh of these shapes that fits the world.
std::vector<MeshSizes> shapes_for(int world) {
  const std::vector<MeshSizes> candidates = {{.dp = 2, .tp = 2},
                                             {.pp = 2, .tp = 2},
                                             {.cp = 2, .tp = 2},
                                             {.dp = 4},
                                             {.tp = 4},
                                             {.dp = 2, .pp = 2, .tp = 2},
                                             {.dp = 2, .cp = 2, .tp = 2},
                                             {.pp = 2, .cp = 2, .tp = 2},
                                             {.dp = 4, .tp = 2},
                                             {.dp = 2, .pp = 2, .cp = 2}};
  std::vector<MeshSizes> out;
  for (const MeshSizes& s : candidates) {
    if (mesh_world_size(s) == world) out.push_back(s);
  }
  return out;
}

TEST(MeshGroups, EverySetOfAxesHasTheRightMembers) {
  const int world = test::world().size(), me = test::world().rank();
  const auto shapes = shapes_for(world);
  ASSERT_FALSE(shapes.empty());
  for (const MeshSizes& s : shapes) {
    const DeviceMesh mesh(test::world(), s);
    EXPECT_EQ(mesh.coords(), DeviceMesh::coords_of(me, s));
    for (AxisSet set = 1; set < (1u << kNumAxes); ++set) {
      const Group g = mesh.group(set);
      std::vector<int> expected;
      for (const auto& grp : mesh_group_ranks(s, set)) {
        if (std::find(grp.begin(), grp.end(), me) != grp.end()) expected = grp;
      }
      const std::vector<int> got = members(g);
      EXPECT_EQ(got, expected) << axis_set_name(set) << " on " << mesh_table(s);
      EXPECT_EQ(g.axis(), axis_set_name(set));
      EXPECT_EQ(got[static_cast<size_t>(g.rank())], me);
    }
  }
}

// Seed 003 §08 on 8 ranks, written out by hand: TP {0,1},{2,3},…; PP {0,2},
// {1,3},{4,6},{5,7}; DP {0,4},{1,5},{2,6},{3,7}.
TEST(MeshGroups, Seed003MappingOnEightRanks) {
  if (test::world().size() != 8) GTEST_SKIP() << "needs 8 ranks";
  const int r = test::world().rank();
  const DeviceMesh mesh(test::world(), MeshSizes{.dp = 2, .pp = 2, .tp = 2});
  EXPECT_EQ(members(mesh.group("tp")), (std::vector<int>{r / 2 * 2, r / 2 * 2 + 1}));
  const int pp_first = r / 4 * 4 + r % 2;
  EXPECT_EQ(members(mesh.group("pp")), (std::vector<int>{pp_first, pp_first + 2}));
  EXPECT_EQ(members(mesh.group("dp")), (std::vector<int>{r % 4, r % 4 + 4}));
  EXPECT_EQ(members(mesh.group("cp")), (std::vector<int>{r}));
  EXPECT_EQ(mesh.coord("dp"), r / 4);
  EXPECT_EQ(mesh.coord("pp"), r / 2 % 2);
  EXPECT_EQ(mesh.coord("tp"), r % 2);
}

TEST(MeshGroups, DataAndContextTogether) {
  const int world = test::world().size(), r = test::world().rank();
  if (world % 4 != 0) GTEST_SKIP() << "needs a multiple of 4 ranks";
  // dp (world/4) × cp 2 × tp 2: the dp+cp group is every rank with my tp coordinate.
  const DeviceMesh mesh(test::world(), MeshSizes{.dp = world / 4, .cp = 2, .tp = 2});
  std::vector<int> expected;
  for (int q = r % 2; q < world; q += 2)
    expected.push_back(q);
  EXPECT_EQ(members(mesh.group({"dp", "cp"})), expected);
  EXPECT_EQ(members(mesh.group({"cp", "dp"})), expected);
  EXPECT_EQ(members(mesh.group("dp+cp")), expected);
  EXPECT_EQ(mesh.group({"cp", "dp"}).axis(), "dp+cp");
  EXPECT_EQ(members(mesh.group("cp")), (std::vector<int>{r / 4 * 4 + r % 2, r / 4 * 4 + r % 2 + 2}));
}

// The sub-axes (mesh/sub_axes.h), members written out by hand from the rank
// order rank = ((dp·PP + pp)·CP + cp)·TP + tp, each named as in the ledger.
std::vector<int> run(int first, int n, int stride) {
  std::vector<int> out;
  for (int i = 0; i < n; ++i)
    out.push_back(first + i * stride);
  return out;
}

TEST(MeshSubAxes, ExpertsOverDataAndContext) {
  const int world = test::world().size(), r = test::world().rank();
  if (world % 4 != 0) GTEST_SKIP() << "needs a multiple of 4 ranks";
  // dp (world/4) × cp 2 × tp 2, ep 2: f = dp·2 + cp; ep pairs the two cp
  // ranks of one dp replica, ep_replicas the dp replicas of one cp rank.
  const DeviceMesh mesh(test::world(), MeshSizes{.dp = world / 4, .cp = 2, .tp = 2}, SubAxisSizes{.ep = 2});
  const int dp = r / 4, cp = r / 2 % 2, tp = r % 2;
  const std::optional<Group> ep = mesh.sub_group(SubAxis::ep), reps = mesh.sub_group(SubAxis::ep_replicas);
  ASSERT_TRUE(ep && reps);
  EXPECT_EQ(members(*ep), (std::vector<int>{dp * 4 + tp, dp * 4 + 2 + tp}));
  EXPECT_EQ(members(*reps), run(cp * 2 + tp, world / 4, 4));
  EXPECT_EQ(ep->rank(), cp);
  EXPECT_EQ(ep->axis(), "ep");
  EXPECT_EQ(reps->axis(), "ep_replicas");
  for (SubAxis s : {SubAxis::tp_r, SubAxis::tp_c, SubAxis::tp_kv, SubAxis::pp_tied})
    EXPECT_FALSE(mesh.sub_group(s)) << sub_axis_name(s);
}

TEST(MeshSubAxes, GridAndKvReplicasInsideTp) {
  const int world = test::world().size(), r = test::world().rank();
  if (world % 4 != 0) GTEST_SKIP() << "needs a multiple of 4 ranks";
  // dp (world/4) × tp 4 as a 2 × 2 grid, t = row·2 + col; kv heads on 2 ranks each.
  const DeviceMesh mesh(test::world(), MeshSizes{.dp = world / 4, .tp = 4},
                        SubAxisSizes{.tp_rows = 2, .kv_replicas = 2});
  const int base = r / 4 * 4, t = r % 4;
  const std::optional<Group> tp_c = mesh.sub_group(SubAxis::tp_c), tp_r = mesh.sub_group(SubAxis::tp_r),
                             tp_kv = mesh.sub_group(SubAxis::tp_kv);
  ASSERT_TRUE(tp_c && tp_r && tp_kv);
  EXPECT_EQ(members(*tp_c), run(base + t / 2 * 2, 2, 1));  // grid row t / 2
  EXPECT_EQ(members(*tp_r), run(base + t % 2, 2, 2));      // grid column t % 2
  EXPECT_EQ(members(*tp_kv), run(base + t / 2 * 2, 2, 1));
  EXPECT_EQ(tp_c->rank(), t % 2);
  EXPECT_EQ(tp_r->rank(), t / 2);
  EXPECT_EQ(tp_c->axis(), "tp_c");
  EXPECT_EQ(tp_r->axis(), "tp_r");
  EXPECT_EQ(tp_kv->axis(), "tp_kv");
  EXPECT_FALSE(mesh.sub_group(SubAxis::ep));
}

TEST(MeshSubAxes, TiedEndsOnlyOnTheFirstAndLastStage) {
  const int world = test::world().size(), r = test::world().rank();
  if (world % 4 != 0) GTEST_SKIP() << "needs a multiple of 4 ranks";
  const int PP = world / 2, pp = r / 2, tp = r % 2;
  const DeviceMesh mesh(test::world(), MeshSizes{.pp = PP, .tp = 2}, SubAxisSizes{.tied_ends = true});
  const std::optional<Group> tied = mesh.sub_group(SubAxis::pp_tied);
  if (pp == 0 || pp == PP - 1) {
    ASSERT_TRUE(tied);
    EXPECT_EQ(members(*tied), (std::vector<int>{tp, (PP - 1) * 2 + tp}));
    EXPECT_EQ(tied->axis(), "pp_tied");
  } else {
    EXPECT_FALSE(tied);
  }
  // pp = 1: no tied group, whatever the model asks.
  const DeviceMesh flat(test::world(), MeshSizes{.dp = world}, SubAxisSizes{.tied_ends = true});
  EXPECT_FALSE(flat.sub_group(SubAxis::pp_tied));
}

TEST(MeshSubAxes, HybridPairsAndRingsInsideCp) {
  const int world = test::world().size(), r = test::world().rank();
  if (world % 4 != 0) GTEST_SKIP() << "needs a multiple of 4 ranks";
  // dp (world/4) × cp 4, pairs: cp_a2a {c, c+1} for even c, cp_ring {c, c+2};
  // the table --print-mesh prints lists the same groups.
  const MeshSizes sizes{.dp = world / 4, .cp = 4};
  const DeviceMesh mesh(test::world(), sizes, SubAxisSizes{.cp_a2a = 2});
  const int base = r / 4 * 4, c = r % 4;
  const std::optional<Group> a2a = mesh.sub_group(SubAxis::cp_a2a), ring = mesh.sub_group(SubAxis::cp_ring);
  ASSERT_TRUE(a2a && ring);
  EXPECT_EQ(members(*a2a), run(base + c / 2 * 2, 2, 1));
  EXPECT_EQ(members(*ring), run(base + c % 2, 2, 2));
  EXPECT_EQ(a2a->rank(), c % 2);
  EXPECT_EQ(ring->rank(), c / 2);
  EXPECT_EQ(a2a->axis(), "cp_a2a");
  EXPECT_EQ(ring->axis(), "cp_ring");
  EXPECT_NE(
      hybrid_cp_table(sizes, 2).find("cp_a2a groups (Ulysses all-to-all of q, k, v and out): {0, 1} {2, 3}"),
      std::string::npos);
  EXPECT_NE(hybrid_cp_table(sizes, 2).find("cp_ring groups (ring of k, v across the groups): {0, 2} {1, 3}"),
            std::string::npos);
  // all-to-all over the whole cp axis (pure Ulysses) builds neither.
  const DeviceMesh whole(test::world(), sizes, SubAxisSizes{.cp_a2a = 4});
  EXPECT_FALSE(whole.sub_group(SubAxis::cp_a2a));
  EXPECT_FALSE(whole.sub_group(SubAxis::cp_ring));
  EXPECT_EQ(hybrid_cp_table(sizes, 4), "");
  EXPECT_THROW(DeviceMesh(test::world(), sizes, SubAxisSizes{.cp_a2a = 3}), ConfigError);
}

TEST(MeshSubAxes, ASubAxisThatDoesNotDivideItsParentFailsWithTheNumbers) {
  const int world = test::world().size();
  try {
    DeviceMesh mesh(test::world(), MeshSizes{.dp = world}, SubAxisSizes{.ep = 3});
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "the mesh's sub-axis ep (3) must be at least 1 and divide dp × cp (" +
                                         std::to_string(world) + ")");
  }
  EXPECT_THROW(DeviceMesh(test::world(), MeshSizes{.tp = world}, SubAxisSizes{.kv_replicas = world + 1}),
               ConfigError);
  EXPECT_THROW(DeviceMesh(test::world(), MeshSizes{.tp = world}, SubAxisSizes{.tp_rows = 0}), ConfigError);
}

TEST(MeshGroups, WrongSizesFailOnEveryRankWithTheNumbers) {
  const int world = test::world().size();
  try {
    DeviceMesh mesh(test::world(), MeshSizes{.dp = world, .pp = 2, .tp = 2});
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "dp (" + std::to_string(world) +
                                         ") × tp (2) × pp (2) = " + std::to_string(4 * world) +
                                         " but the world has " + std::to_string(world) + " ranks");
  }
  EXPECT_THROW(DeviceMesh(test::world(), MeshSizes{.dp = world}).group("xp"), ConfigError);
}

}  // namespace
}  // namespace mt

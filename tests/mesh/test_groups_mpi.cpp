// Mesh groups under mpirun: each group's members, checked by gathering the
// world ranks inside the group.
#include <gtest/gtest.h>

#include <algorithm>

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

// Pure mesh tests: rank ↔ coordinates, groups, validation, the table
// (DeviceMesh's static functions forward to these).
#include <gtest/gtest.h>

#include "core/error.h"
#include "mesh/mesh_shape.h"

namespace mt {
namespace {

using Groups = std::vector<std::vector<int>>;

TEST(MeshShape, RoundTripForManyShapes) {
  for (int pp : {1, 2, 3})
    for (int dp : {1, 2, 4})
      for (int cp : {1, 3})
        for (int tp : {1, 2, 5}) {
          const MeshSizes s = MeshSizes{.dp = dp, .pp = pp, .cp = cp, .tp = tp};
          const int world = pp * dp * cp * tp;
          std::vector<int> seen(static_cast<size_t>(world), 0);
          for (int r = 0; r < world; ++r) {
            const MeshCoords c = mesh_coords_of(r, s);
            for (int i = 0; i < kNumAxes; ++i) {
              EXPECT_GE(c[i], 0);
              EXPECT_LT(c[i], s[static_cast<Axis>(i)]);
            }
            EXPECT_EQ(mesh_rank_of(c, s), r);
            ++seen[static_cast<size_t>(r)];
          }
          for (int n : seen)
            EXPECT_EQ(n, 1);
        }
}

TEST(MeshShape, TpIsInnermostAndDpOutermost) {
  // pp 3, dp 2, cp 2, tp 5: rank = ((dp·3 + pp)·2 + cp)·5 + tp.
  const MeshSizes s = MeshSizes{.dp = 2, .pp = 3, .cp = 2, .tp = 5};
  const MeshCoords c = mesh_coords_of(((1 * 3 + 2) * 2 + 1) * 5 + 3, s);
  EXPECT_EQ(c[axis_index(Axis::pp)], 2);
  EXPECT_EQ(c[axis_index(Axis::dp)], 1);
  EXPECT_EQ(c[axis_index(Axis::cp)], 1);
  EXPECT_EQ(c[axis_index(Axis::tp)], 3);
}

// Seed 003 §08: DP=2, TP=2, PP=2 on 8 devices. Replica A uses devices 0–3
// (stage 0 TP {0,1}, stage 1 TP {2,3}), replica B 4–7; devices 0 and 4 hold
// the same shard, likewise 1 and 5, 2 and 6, 3 and 7.
TEST(MeshShape, Seed003Section08Mapping) {
  const MeshSizes s = MeshSizes{.dp = 2, .pp = 2, .tp = 2};
  EXPECT_EQ(mesh_group_ranks(s, parse_axis_set("tp")), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(mesh_group_ranks(s, parse_axis_set("pp")), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh_group_ranks(s, parse_axis_set("dp")), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(mesh_group_ranks(s, parse_axis_set("cp")), (Groups{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}));
  EXPECT_EQ(mesh_group_ranks(s, parse_axis_set("pp+tp")), (Groups{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(mesh_group_ranks(s, parse_axis_set("dp+tp")), (Groups{{0, 1, 4, 5}, {2, 3, 6, 7}}));
}

TEST(MeshShape, SetsOfAxes) {
  const MeshSizes s = MeshSizes{.dp = 2, .cp = 2, .tp = 2};  // dp 2 × cp 2 × tp 2
  EXPECT_EQ(mesh_group_ranks(s, parse_axis_set("dp+cp")), (Groups{{0, 2, 4, 6}, {1, 3, 5, 7}}));
  EXPECT_EQ(mesh_group_ranks(s, parse_axis_set("cp+dp")), mesh_group_ranks(s, parse_axis_set("dp+cp")));
  EXPECT_EQ(mesh_group_ranks(s, parse_axis_set("cp")), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(mesh_group_ranks(s, parse_axis_set("pp+dp+cp+tp")), (Groups{{0, 1, 2, 3, 4, 5, 6, 7}}));
  EXPECT_EQ(axis_set_name(parse_axis_set("tp+dp")), "dp+tp");
  EXPECT_THROW(parse_axis_set("dp+xp"), ConfigError);
  EXPECT_THROW(parse_axis_set("dp+dp"), ConfigError);
}

std::string validation_message(MeshSizes s, int world) {
  try {
    validate_mesh(s, world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

TEST(MeshShape, ValidationNamesTheNumbers) {
  EXPECT_EQ(validation_message(MeshSizes{.dp = 2, .pp = 2, .tp = 2}, 6),
            "dp (2) × tp (2) × pp (2) = 8 but the world has 6 ranks");
  EXPECT_EQ(validation_message(MeshSizes{.dp = 2}, 4), "dp (2) = 2 but the world has 4 ranks");
  EXPECT_EQ(validation_message(MeshSizes{}, 4),
            "dp (1) × cp (1) × tp (1) × pp (1) = 1 but the world has 4 ranks");
  EXPECT_EQ(validation_message(MeshSizes{.dp = 2, .cp = 3}, 1),
            "dp (2) × cp (3) = 6 but the world has 1 rank");
  EXPECT_EQ(validation_message(MeshSizes{.dp = 2, .tp = 0}, 2), "tp (0) must be at least 1");
  EXPECT_EQ(validation_message(MeshSizes{.dp = 2, .pp = 2, .tp = 2}, 8), "no error");
}

TEST(MeshShape, TableShowsTheSeedMapping) {
  const std::string t = mesh_table(MeshSizes{.dp = 2, .pp = 2, .tp = 2});
  EXPECT_NE(t.find("replica   stage 0 TP group   stage 1 TP group\n"), std::string::npos) << t;
  EXPECT_NE(t.find("dp 0      0 1                2 3\n"), std::string::npos) << t;
  EXPECT_NE(t.find("dp 1      4 5                6 7\n"), std::string::npos) << t;
  EXPECT_NE(t.find("{0, 4} {1, 5} {2, 6} {3, 7}"), std::string::npos) << t;
  EXPECT_NE(t.find("ranks 0 and 4 hold the same shard"), std::string::npos) << t;
  EXPECT_NE(t.find("PP groups"), std::string::npos) << t;
  EXPECT_EQ(t.find("CP groups"), std::string::npos) << t;
}

TEST(MeshShape, TableWithContextParallel) {
  const std::string t = mesh_table(MeshSizes{.dp = 2, .cp = 2, .tp = 2});
  EXPECT_NE(t.find("dp 0      {0 1} {2 3}"), std::string::npos) << t;
  EXPECT_NE(t.find("dp 1      {4 5} {6 7}"), std::string::npos) << t;
  EXPECT_NE(t.find("CP groups (one sequence, split by tokens): {0, 2} {1, 3} {4, 6} {5, 7}"),
            std::string::npos)
      << t;
}

}  // namespace
}  // namespace mt

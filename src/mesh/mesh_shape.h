// The shape of a device mesh and the rank ↔ coordinate mapping: pure
// functions of the axis sizes, testable without MPI (DeviceMesh in mesh.h adds
// the process groups).
//
// Axes are named dp, pp, cp, tp. Sizes are a struct with a field per axis
// (MeshSizes{.dp = 2, .tp = 4}, the others 1); coordinates an array indexed by
// Axis.
//
// Rank order (which axis varies fastest; docs/PARALLELISM.md "The device mesh")
// follows picotron's arange(world).view(dp, pp, cp, tp): dp outermost, then
// pp, cp, tp innermost.
//   rank = ((dp·PP + pp)·CP + cp)·TP + tp
// So a TP group is a run of adjacent ranks (one node when ranks are packed per
// node), a pipeline stage's TP groups sit next to each other, and a DP group
// strides across replicas (for dp=2, pp=2, tp=2: TP {0,1}, PP {0,2}, DP {0,4}).
#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

enum class Axis : int { pp = 0, dp = 1, cp = 2, tp = 3 };
inline constexpr int kNumAxes = 4;
inline constexpr std::array<Axis, kNumAxes> kAllAxes = {Axis::pp, Axis::dp, Axis::cp, Axis::tp};
// Outermost first: the order in which coordinates nest into a rank.
inline constexpr std::array<Axis, kNumAxes> kRankOrder = {Axis::dp, Axis::pp, Axis::cp, Axis::tp};

// The size of each axis; fields in rank order (dp outermost, tp innermost).
// Expert parallelism (ep, ep_replicas inside dp × cp), the 2-D tp grid (tp_r,
// tp_c), the kv-replica group (tp_kv) and the tied-embedding group (pp_tied)
// are sub-axes: blocks of coordinates inside these axes (sub_axes.h), so none
// adds a rank axis here.
struct MeshSizes {
  // Only named fields: a positional {2, 2, 1, 2} does not compile (the axis
  // order is easy to get wrong, and a wrong one still multiplies to the world).
  struct NamedOnly {
    explicit NamedOnly() = default;
    bool operator==(const NamedOnly&) const = default;
  };
  [[no_unique_address]] NamedOnly named_only{};
  int dp = 1, pp = 1, cp = 1, tp = 1;

  int operator[](Axis a) const;
  int& operator[](Axis a);
  bool operator==(const MeshSizes&) const = default;
};
using MeshCoords = std::array<int, kNumAxes>;  // indexed by Axis: {pp, dp, cp, tp}

inline int axis_index(Axis a) {
  return static_cast<int>(a);
}
const char* axis_name(Axis a);  // "pp", "dp", "cp", "tp"
// "tp" → Axis::tp; throws ConfigError naming the known axes otherwise.
Axis parse_axis(std::string_view name);

// A set of axes as a bit mask (bit axis_index(a)). Named by its axes joined
// with '+' in pp, dp, cp, tp order: "dp+cp".
using AxisSet = unsigned;
inline AxisSet axis_bit(Axis a) {
  return 1u << axis_index(a);
}
std::string axis_set_name(AxisSet set);
// "dp+cp" or "dp" → set; throws ConfigError on an unknown or repeated axis.
AxisSet parse_axis_set(std::string_view names);

int mesh_world_size(const MeshSizes& sizes);  // product of the sizes
// Throws ConfigError with the numbers: a size < 1, or
// "dp (2) × tp (2) × pp (2) = 8 but the world has 6 ranks".
void validate_mesh(const MeshSizes& sizes, int world_size);

MeshCoords mesh_coords_of(int rank, const MeshSizes& sizes);
int mesh_rank_of(const MeshCoords& coords, const MeshSizes& sizes);

// Every group of the axes in `set`: the ranks that differ only in those axes.
// Groups are ordered by their lowest rank, each group's ranks ascending (the
// order of the group's own ranks).
std::vector<std::vector<int>> mesh_group_ranks(const MeshSizes& sizes, AxisSet set);

// The rank map as a readable table (--print-mesh): one row per dp replica, one
// column per pipeline stage listing its TP groups; then the DP groups (and CP
// and PP groups when those axes are > 1).
std::string mesh_table(const MeshSizes& sizes);
// HSDP's sub-axes under --print-mesh (sub_axes.h dp_shard, dp_replicas): the
// shard groups of dp_shard consecutive dp ranks and the replica groups; "" when
// dp_shard is 0 or dp (flat ZeRO).
std::string hsdp_table(const MeshSizes& sizes, int dp_shard);
// Hybrid cp's sub-axes under --print-mesh (sub_axes.h cp_a2a, cp_ring): the
// all-to-all groups of `a2a` consecutive cp ranks and the rings across them;
// "" unless 1 < a2a < cp.
std::string hybrid_cp_table(const MeshSizes& sizes, int a2a);

}  // namespace mt

// DeviceMesh: the world seen as a 4-axis grid (pp, dp, cp, tp) with one process
// group per axis and per set of axes, and the sub-axes carved out of them (ep,
// ep_replicas, tp_r, tp_c, tp_kv, pp_tied: sub_axes.h). Every group of a run is
// built here, in the constructor. A value passed to whoever needs it, never a
// global. Rank order and the pure mapping are in mesh_shape.h.
//
//   DeviceMesh mesh(world, MeshSizes{.dp = 2, .pp = 2, .tp = 2});
//   mesh.group("tp").all_reduce(buf, n, "layer 3 mlp out");
//   mesh.group({"dp", "cp"})  // gradient reduction over data and context
//   DeviceMesh m2(world, MeshSizes{.dp = 4}, SubAxisSizes{.ep = 2});
//   m2.sub_group(SubAxis::ep)  // the 2 ranks exchanging tokens (nullopt if not built)
#pragma once

#include <array>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/group.h"
#include "mesh/mesh_shape.h"
#include "mesh/sub_axes.h"

namespace mt {

class DeviceMesh {
 public:
  // Validates the sizes against the world and the sub-axes against their
  // parents (ConfigError with the numbers) and builds every group with
  // Group::split: one per set of axes, then each sub-axis `sub` asks for, in
  // kAllSubAxes order. Collective: every rank of `world` must construct the
  // mesh with the same sizes.
  DeviceMesh(const Group& world, MeshSizes sizes, SubAxisSizes sub = {});

  // Pure mapping (no communication).
  static MeshCoords coords_of(int rank, const MeshSizes& sizes) { return mesh_coords_of(rank, sizes); }
  static int rank_of(const MeshCoords& coords, const MeshSizes& sizes) { return mesh_rank_of(coords, sizes); }
  static std::vector<std::vector<int>> group_ranks(const MeshSizes& sizes, std::string_view axes) {
    return mesh_group_ranks(sizes, parse_axis_set(axes));
  }
  static std::string table(const MeshSizes& sizes) { return mesh_table(sizes); }

  const MeshSizes& sizes() const { return sizes_; }
  int size(Axis a) const { return sizes_[a]; }
  int size(std::string_view axis) const { return size(parse_axis(axis)); }
  int rank() const { return world_.rank(); }
  int world_size() const { return world_.size(); }
  const MeshCoords& coords() const { return coords_; }  // this rank's
  int coord(Axis a) const { return coords_[axis_index(a)]; }
  int coord(std::string_view axis) const { return coord(parse_axis(axis)); }

  // The group of the ranks that differ from this one only in the named axes:
  // group("tp"), group("dp+cp"), group({"dp", "cp"}) (any order). Its ranks are
  // ordered by world rank; its axis name lists the axes in pp, dp, cp, tp order.
  // Returned by value: a Group is a handle (backend and context are shared),
  // and its collectives are non-const.
  Group group(std::string_view axes) const { return group(parse_axis_set(axes)); }
  Group group(std::initializer_list<std::string_view> axes) const;
  Group group(AxisSet set) const;
  Group world() const { return world_; }

  // The group of sub-axis s holding this rank (sub_axes.h); nullopt when the
  // mesh does not build it, and for pp_tied on the middle stages.
  std::optional<Group> sub_group(SubAxis s) const { return sub_groups_[static_cast<size_t>(s)]; }
  const SubAxisSizes& sub_sizes() const { return sub_; }

  // World ranks of every group of `axes` (see mesh_group_ranks).
  std::vector<std::vector<int>> group_ranks(std::string_view axes) const { return group_ranks(sizes_, axes); }
  std::string table() const { return mesh_table(sizes_); }

 private:
  Group world_;
  MeshSizes sizes_;
  SubAxisSizes sub_;
  MeshCoords coords_{};
  std::array<Group, 1u << kNumAxes> groups_;                  // indexed by AxisSet; [0] unused
  std::array<std::optional<Group>, kNumSubAxes> sub_groups_;  // indexed by SubAxis
};

}  // namespace mt

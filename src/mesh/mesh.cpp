#include "mesh/mesh.h"

#include "core/error.h"

namespace mt {

DeviceMesh::DeviceMesh(const Group& world, MeshSizes sizes, SubAxisSizes sub)
    : world_(world), sizes_(sizes), sub_(sub) {
  validate_mesh(sizes_, world_.size());
  validate_sub_axes(sizes_, sub_);
  coords_ = mesh_coords_of(world_.rank(), sizes_);
  // One split per set of axes, in the same order on every rank. Color: the
  // rank of the group's first member (coordinates in the set zeroed); key: the
  // world rank, so group ranks follow world order.
  for (AxisSet set = 1; set < groups_.size(); ++set) {
    MeshCoords leader = coords_;
    for (Axis a : kAllAxes) {
      if (set & axis_bit(a)) leader[axis_index(a)] = 0;
    }
    groups_[set] = world_.split(mesh_rank_of(leader, sizes_), world_.rank(), axis_set_name(set));
  }
  // Each sub-axis splits its parent group (sub_axes.h), in kAllSubAxes order.
  for (SubAxis s : kAllSubAxes) {
    if (!sub_axis_built(s, sizes_, sub_)) continue;
    const Group& parent = groups_[sub_axis_parent(s)];
    const SubAxisSplit at = sub_axis_split(s, parent.rank(), parent.size(), sub_);
    Group g = parent.split(at.color, at.key, sub_axis_name(s));
    if (at.keep) sub_groups_[static_cast<size_t>(s)] = std::move(g);
  }
}

Group DeviceMesh::group(std::initializer_list<std::string_view> axes) const {
  AxisSet set = 0;
  for (std::string_view name : axes) {
    const Axis a = parse_axis(name);
    MT_REQUIRE(!(set & axis_bit(a)), ConfigError, "mesh axis '", name, "' named twice");
    set |= axis_bit(a);
  }
  return group(set);
}

Group DeviceMesh::group(AxisSet set) const {
  MT_REQUIRE(set > 0 && set < groups_.size(), ConfigError,
             "a mesh group needs at least one of pp, dp, cp, tp");
  return groups_[set];
}

}  // namespace mt

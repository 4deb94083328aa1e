#include "mesh/mesh.h"

#include "core/error.h"

namespace mt {

DeviceMesh::DeviceMesh(const Group& world, MeshSizes sizes) : world_(world), sizes_(sizes) {
  validate_mesh(sizes_, world_.size());
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

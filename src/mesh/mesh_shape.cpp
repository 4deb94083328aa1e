#include "mesh/mesh_shape.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace mt {

const char* axis_name(Axis a) {
  switch (a) {
    case Axis::pp:
      return "pp";
    case Axis::dp:
      return "dp";
    case Axis::cp:
      return "cp";
    case Axis::tp:
      return "tp";
  }
  return "?";
}

Axis parse_axis(std::string_view name) {
  for (Axis a : kAllAxes) {
    if (name == axis_name(a)) return a;
  }
  MT_THROW(ConfigError, "unknown mesh axis '", name, "' (the axes are pp, dp, cp, tp)");
}

std::string axis_set_name(AxisSet set) {
  std::string out;
  for (Axis a : kAllAxes) {
    if (!(set & axis_bit(a))) continue;
    if (!out.empty()) out += '+';
    out += axis_name(a);
  }
  return out.empty() ? "none" : out;
}

AxisSet parse_axis_set(std::string_view names) {
  AxisSet set = 0;
  size_t start = 0;
  while (true) {
    size_t plus = names.find('+', start);
    Axis a = parse_axis(names.substr(start, plus == std::string_view::npos ? plus : plus - start));
    MT_REQUIRE(!(set & axis_bit(a)), ConfigError, "mesh axis '", axis_name(a), "' repeated in '", names, "'");
    set |= axis_bit(a);
    if (plus == std::string_view::npos) break;
    start = plus + 1;
  }
  return set;
}

namespace {
// The field of axis a, for MeshSizes and const MeshSizes alike.
template <class Sizes>
auto& axis_field(Sizes& s, Axis a) {
  switch (a) {
    case Axis::dp:
      return s.dp;
    case Axis::pp:
      return s.pp;
    case Axis::cp:
      return s.cp;
    case Axis::tp:
      break;
  }
  return s.tp;
}
}  // namespace

int MeshSizes::operator[](Axis a) const {
  return axis_field(*this, a);
}

int& MeshSizes::operator[](Axis a) {
  return axis_field(*this, a);
}

int mesh_world_size(const MeshSizes& sizes) {
  return sizes.dp * sizes.pp * sizes.cp * sizes.tp;
}

void validate_mesh(const MeshSizes& sizes, int world_size) {
  for (Axis a : kAllAxes) {
    int s = sizes[a];
    MT_REQUIRE(s >= 1, ConfigError, axis_name(a), " (", s, ") must be at least 1");
  }
  const int product = mesh_world_size(sizes);
  if (product == world_size) return;
  // Name the axes that split the world, in the order people say them.
  const std::array<Axis, kNumAxes> spoken = {Axis::dp, Axis::cp, Axis::tp, Axis::pp};
  int split_axes = 0;
  for (Axis a : spoken)
    split_axes += sizes[a] > 1 ? 1 : 0;
  std::ostringstream os;
  bool first = true;
  for (Axis a : spoken) {
    int s = sizes[a];
    if (s == 1 && split_axes >= 1) continue;
    os << (first ? "" : " × ") << axis_name(a) << " (" << s << ")";
    first = false;
  }
  MT_THROW(ConfigError, os.str(), " = ", product, " but the world has ", world_size,
           world_size == 1 ? " rank" : " ranks");
}

MeshCoords mesh_coords_of(int rank, const MeshSizes& sizes) {
  MT_CHECK(rank >= 0 && rank < mesh_world_size(sizes), "rank ", rank);
  MeshCoords c{};
  for (auto it = kRankOrder.rbegin(); it != kRankOrder.rend(); ++it) {
    const int s = sizes[*it];
    c[axis_index(*it)] = rank % s;
    rank /= s;
  }
  return c;
}

int mesh_rank_of(const MeshCoords& coords, const MeshSizes& sizes) {
  int rank = 0;
  for (Axis a : kRankOrder) {
    const int i = axis_index(a);
    MT_CHECK(coords[i] >= 0 && coords[i] < sizes[a], axis_name(a), " coordinate ", coords[i]);
    rank = rank * sizes[a] + coords[i];
  }
  return rank;
}

std::vector<std::vector<int>> mesh_group_ranks(const MeshSizes& sizes, AxisSet set) {
  // Ranks are visited in ascending order, so each group comes out sorted and
  // the groups come out ordered by their lowest rank.
  const int world = mesh_world_size(sizes);
  std::vector<std::vector<int>> groups;
  std::vector<int> group_of(static_cast<size_t>(world), -1);
  for (int r = 0; r < world; ++r) {
    MeshCoords c = mesh_coords_of(r, sizes);
    for (Axis a : kAllAxes) {
      if (set & axis_bit(a)) c[axis_index(a)] = 0;
    }
    const int leader = mesh_rank_of(c, sizes);
    if (group_of[static_cast<size_t>(leader)] < 0) {
      group_of[static_cast<size_t>(leader)] = static_cast<int>(groups.size());
      groups.emplace_back();
    }
    groups[static_cast<size_t>(group_of[static_cast<size_t>(leader)])].push_back(r);
  }
  return groups;
}

}  // namespace mt

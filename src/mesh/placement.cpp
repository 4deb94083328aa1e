#include "mesh/placement.h"

#include <algorithm>
#include <numeric>
#include <set>
#include <sstream>

#include "core/error.h"

namespace mt {

RankPlacement parse_placement(std::string_view name) {
  const auto bad = [&](const std::string& why) {
    MT_THROW(ConfigError, "--placement '", name, "' ", why,
             " (nodes: the mesh follows MPI's nodes, tp first; nodes:AXES: those mesh axes first, e.g. "
             "nodes:cp or nodes:cp+dp; ranks: mpirun's rank order)");
  };
  if (name == "ranks") return {RankPlacement::Kind::ranks, {}};
  if (name.substr(0, 5) != "nodes" || (name.size() > 5 && name[5] != ':')) bad("is not a placement");
  RankPlacement p;
  if (name.size() <= 5) return p;
  std::string_view rest = name.substr(6);
  while (true) {
    const size_t plus = rest.find('+');
    const std::string_view a = rest.substr(0, plus);
    Axis axis = Axis::tp;
    try {
      axis = parse_axis(a);
    } catch (const ConfigError&) {
      bad("names '" + std::string(a) + "', which is not a mesh axis (tp, cp, pp, dp)");
    }
    if (std::find(p.inner.begin(), p.inner.end(), axis) != p.inner.end())
      bad("names axis " + std::string(a) + " twice");
    p.inner.push_back(axis);
    if (plus == std::string_view::npos) break;
    rest = rest.substr(plus + 1);
  }
  return p;
}

std::string placement_name(const RankPlacement& p) {
  if (p.kind == RankPlacement::Kind::ranks) return "ranks";
  std::string s = "nodes";
  for (size_t i = 0; i < p.inner.size(); ++i) {
    s.push_back(i ? '+' : ':');
    s.append(axis_name(p.inner[i]));
  }
  return s;
}

std::vector<Axis> node_order(const RankPlacement& p) {
  std::vector<Axis> order = p.inner;
  for (Axis a : {Axis::tp, Axis::cp, Axis::pp, Axis::dp})
    if (std::find(order.begin(), order.end(), a) == order.end()) order.push_back(a);
  return order;
}

std::vector<int> mesh_positions(const std::vector<int>& node_of_rank, const RankPlacement& p,
                                const MeshSizes& sizes) {
  const size_t P = node_of_rank.size();
  std::vector<int> order(P);
  std::iota(order.begin(), order.end(), 0);
  if (p.kind == RankPlacement::Kind::ranks) return order;
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return node_of_rank[static_cast<size_t>(a)] < node_of_rank[static_cast<size_t>(b)];
  });
  MT_CHECK(static_cast<size_t>(sizes.dp * sizes.pp * sizes.cp * sizes.tp) == P, "a mesh of ",
           sizes.dp * sizes.pp * sizes.cp * sizes.tp, " positions placed on ", P, " ranks");
  const std::vector<Axis> axes = node_order(p);
  std::vector<int> position(P);
  for (size_t k = 0; k < P; ++k) {
    MeshCoords c{};
    size_t rest = k;
    for (Axis a : axes) {
      const size_t n = static_cast<size_t>(sizes[a]);
      c[static_cast<size_t>(axis_index(a))] = static_cast<int>(rest % n);
      rest /= n;
    }
    position[static_cast<size_t>(order[k])] = mesh_rank_of(c, sizes);
  }
  return position;
}

Group place_world(const Group& world, const std::vector<int>& position_of_rank) {
  MT_CHECK(static_cast<int>(position_of_rank.size()) == world.size(), "placement of ",
           position_of_rank.size(), " ranks on a world of ", world.size());
  bool moved = false;
  for (size_t r = 0; r < position_of_rank.size(); ++r)
    moved = moved || position_of_rank[r] != static_cast<int>(r);
  if (!moved) return world;
  // One color; the key is the position, so the new rank is the position.
  return world.split(0, position_of_rank[static_cast<size_t>(world.rank())], "world");
}

namespace {

std::string axis_label(Axis a) {
  std::string s = axis_name(a);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(c - 32); });
  return s;
}

// One line per axis: "TP groups: {0, 1} on n0; {2, 3} on n1 (each inside one node)".
void print_groups(std::ostream& os, const std::string& label, const std::vector<std::vector<int>>& groups,
                  const std::vector<int>& node_of_position, const std::vector<std::string>& names) {
  int spanning = 0;
  os << label << " groups:";
  for (size_t g = 0; g < groups.size(); ++g) {
    std::set<int> touched;
    os << (g ? "; {" : " {");
    for (size_t i = 0; i < groups[g].size(); ++i) {
      os << (i ? ", " : "") << groups[g][i];
      touched.insert(node_of_position[static_cast<size_t>(groups[g][i])]);
    }
    os << "} on ";
    bool first = true;
    for (int n : touched) {
      os << (first ? "" : " + ") << names[static_cast<size_t>(n)];
      first = false;
    }
    spanning += touched.size() > 1 ? 1 : 0;
  }
  if (spanning == 0)
    os << " (each inside one node)\n";
  else
    os << " (" << spanning << " of " << groups.size() << " across nodes)\n";
}

// Expert parallelism's groups: runs of `ep` consecutive members of each dp × cp group (sub_axes.h).
std::vector<std::vector<int>> ep_groups(const MeshSizes& sizes, int ep) {
  std::vector<std::vector<int>> out;
  for (const std::vector<int>& parent : mesh_group_ranks(sizes, axis_bit(Axis::dp) | axis_bit(Axis::cp)))
    for (size_t i = 0; i < parent.size(); ++i) {
      if (i % static_cast<size_t>(ep) == 0) out.emplace_back();
      out.back().push_back(parent[i]);
    }
  return out;
}

std::vector<int> node_of_positions(const std::vector<int>& position_of_rank,
                                   const std::vector<int>& node_of_rank) {
  std::vector<int> node_of_position(position_of_rank.size());
  for (size_t r = 0; r < position_of_rank.size(); ++r)
    node_of_position[static_cast<size_t>(position_of_rank[r])] = node_of_rank[r];
  return node_of_position;
}

void print_set(std::ostream& os, const std::vector<int>& ranks) {
  os << '{';
  for (size_t i = 0; i < ranks.size(); ++i)
    os << (i ? ", " : "") << ranks[i];
  os << '}';
}

}  // namespace

std::string hierarchical_dp_table(const MeshSizes& sizes, const std::vector<int>& position_of_rank,
                                  const std::vector<int>& node_of_rank,
                                  const std::vector<std::string>& names) {
  const std::vector<int> node_of_position = node_of_positions(position_of_rank, node_of_rank);
  std::ostringstream inside, across;
  bool first_inside = true, first_across = true;
  for (const std::vector<int>& group : mesh_group_ranks(sizes, axis_bit(Axis::dp) | axis_bit(Axis::cp))) {
    std::vector<int>
        nodes;  // in the order of each node's first rank of the group (comm/nodes.h split_by_node)
    std::vector<std::vector<int>> parts;
    for (int r : group) {
      const int n = node_of_position[static_cast<size_t>(r)];
      auto it = std::find(nodes.begin(), nodes.end(), n);
      if (it == nodes.end()) {
        nodes.push_back(n);
        parts.emplace_back();
        it = nodes.end() - 1;
      }
      parts[static_cast<size_t>(it - nodes.begin())].push_back(r);
    }
    for (size_t i = 0; i < parts.size(); ++i) {
      inside << (first_inside ? " " : "; ");
      print_set(inside, parts[i]);
      inside << " on " << names[static_cast<size_t>(nodes[i])];
      first_inside = false;
    }
    for (size_t k = 0; k < parts.front().size(); ++k) {
      std::vector<int> a;
      for (const auto& part : parts)
        if (k < part.size()) a.push_back(part[k]);
      across << (first_across ? " " : "; ");
      print_set(across, a);
      first_across = false;
    }
  }
  return "DP all-reduce: hierarchical\n  reduce-scatter, all-gather inside a node:" + inside.str() +
         "\n  all-reduce across the nodes:" + across.str() + "\n";
}

std::string mesh_node_table(const MeshSizes& sizes, const std::vector<int>& position_of_rank,
                            const std::vector<int>& node_of_rank, const std::vector<std::string>& names,
                            int ep) {
  const size_t P = position_of_rank.size();
  const std::vector<int> node_of_position = node_of_positions(position_of_rank, node_of_rank);
  std::vector<int> rank_of_position(P);
  for (size_t r = 0; r < P; ++r)
    rank_of_position[static_cast<size_t>(position_of_rank[r])] = static_cast<int>(r);
  std::ostringstream os;
  os << "\nnodes: " << names.size()
     << " (MPI: the ranks that share memory; names from MPI_Get_processor_name)\n";
  for (size_t n = 0; n < names.size(); ++n) {
    std::ostringstream positions, ranks;
    bool moved = false;
    for (size_t p = 0; p < P; ++p) {
      if (node_of_position[p] != static_cast<int>(n)) continue;
      positions << ' ' << p;
      ranks << ' ' << rank_of_position[p];
      moved = moved || rank_of_position[p] != static_cast<int>(p);
    }
    os << "  " << names[n] << ": mesh ranks" << positions.str();
    if (moved) os << " (mpirun's ranks" << ranks.str() << ')';
    os << '\n';
  }
  for (Axis a : {Axis::tp, Axis::cp, Axis::pp, Axis::dp}) {
    if (sizes[a] > 1)
      print_groups(os, axis_label(a), mesh_group_ranks(sizes, axis_bit(a)), node_of_position, names);
  }
  if (ep > 1) print_groups(os, "EP", ep_groups(sizes, ep), node_of_position, names);
  return os.str();
}

}  // namespace mt

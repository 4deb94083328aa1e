// mesh_table(): the rank map printed by `meshtrain train --print-mesh`.
#include <algorithm>
#include <sstream>

#include "mesh/mesh_shape.h"

namespace mt {
namespace {

std::string join(const std::vector<int>& ranks, const char* sep) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i) s += sep;
    s += std::to_string(ranks[i]);
  }
  return s;
}

std::string braced(const std::vector<std::vector<int>>& groups) {
  std::string s;
  for (size_t i = 0; i < groups.size(); ++i) {
    s += i ? " {" : "{";
    s += join(groups[i], ", ");
    s += '}';
  }
  return s;
}

// "0 and 4" / "0, 4 and 8"
std::string spoken_list(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += i + 1 == ranks.size() ? " and " : ", ";
    s += std::to_string(ranks[i]);
  }
  return s;
}

void print_aligned(std::ostream& os, const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    width.resize(std::max(width.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c)
      width[c] = std::max(width[c], row[c].size());
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(width[c] - row[c].size() + 3, ' ');
    }
    os << line << '\n';
  }
}

}  // namespace

std::string mesh_table(const MeshSizes& sizes) {
  const int pp = sizes.pp, dp = sizes.dp, cp = sizes.cp, tp = sizes.tp;
  std::ostringstream os;
  os << "mesh: dp " << dp << " × pp " << pp << " × cp " << cp << " × tp " << tp << " = "
     << mesh_world_size(sizes)
     << " ranks (dp outermost, tp innermost: a TP group is a run of adjacent ranks)\n\n";

  // One row per replica, one column per stage; a cell lists the stage's TP
  // groups (one per cp position).
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"replica"};
  for (int s = 0; s < pp; ++s) {
    std::string h = "stage " + std::to_string(s);
    if (cp > 1) {
      h += " TP groups (cp 0..";
      h += std::to_string(cp - 1);
      h += ')';
    } else {
      h += " TP group";
    }
    header.push_back(h);
  }
  rows.push_back(header);
  for (int d = 0; d < dp; ++d) {
    std::vector<std::string> row = {"dp " + std::to_string(d)};
    for (int s = 0; s < pp; ++s) {
      std::string cell;
      for (int c = 0; c < cp; ++c) {
        std::vector<int> group;
        for (int t = 0; t < tp; ++t) {
          MeshCoords co{};
          co[axis_index(Axis::pp)] = s;
          co[axis_index(Axis::dp)] = d;
          co[axis_index(Axis::cp)] = c;
          co[axis_index(Axis::tp)] = t;
          group.push_back(mesh_rank_of(co, sizes));
        }
        if (cp == 1) {
          cell += join(group, " ");
        } else {
          cell += c ? " {" : "{";
          cell += join(group, " ");
          cell += '}';
        }
      }
      row.push_back(cell);
    }
    rows.push_back(row);
  }
  print_aligned(os, rows);

  os << '\n';
  const auto dp_groups = mesh_group_ranks(sizes, axis_bit(Axis::dp));
  if (dp == 1) {
    os << "DP groups: none (dp = 1: a single replica)\n";
  } else {
    os << "DP groups (same stage and shard in every replica; they sum gradients): " << braced(dp_groups)
       << '\n';
    os << "  ranks " << spoken_list(dp_groups[0]) << " hold the same shard";
    for (size_t g = 1; g < dp_groups.size(); ++g) {
      os << (g == 1 ? "; likewise " : ", ") << join(dp_groups[g], "-");
    }
    os << ".\n";
  }
  if (cp > 1) {
    os << "CP groups (one sequence, split by tokens): " << braced(mesh_group_ranks(sizes, axis_bit(Axis::cp)))
       << '\n';
  }
  if (pp > 1) {
    os << "PP groups (the stages of one replica, point to point): "
       << braced(mesh_group_ranks(sizes, axis_bit(Axis::pp))) << '\n';
  }
  return os.str();
}

std::string hsdp_table(const MeshSizes& sizes, int dp_shard) {
  if (dp_shard <= 0 || dp_shard >= sizes.dp) return "";
  // The groups of dp+cp (ordered by world rank: flattened index dp·CP + cp),
  // cut as sub_axes.cpp cuts them: runs of dp_shard·cp, and their strides.
  const int k = dp_shard * sizes.cp;
  std::vector<std::vector<int>> shards, replicas;
  for (const std::vector<int>& g : mesh_group_ranks(sizes, axis_bit(Axis::dp) | axis_bit(Axis::cp))) {
    for (size_t i = 0; i < g.size(); ++i) {
      if (i % static_cast<size_t>(k) == 0) shards.emplace_back();
      shards.back().push_back(g[i]);
    }
    for (int j = 0; j < k; ++j) {
      replicas.emplace_back();
      for (size_t i = static_cast<size_t>(j); i < g.size(); i += static_cast<size_t>(k))
        replicas.back().push_back(g[i]);
    }
  }
  std::ostringstream os;
  os << "HSDP: dp " << sizes.dp << " = " << sizes.dp / dp_shard << " replicas x " << dp_shard
     << " shards (parallel.dp_shard; consecutive dp ranks, the closest links)\n";
  os << "dp_shard groups (ZeRO's shards; reduce-scatter, all-gather): " << braced(shards) << '\n';
  os << "dp_replicas groups (the same shard; all-reduce of the reduced shards): " << braced(replicas) << '\n';
  return os.str();
}

std::string hybrid_cp_table(const MeshSizes& sizes, int a2a) {
  if (a2a <= 1 || a2a >= sizes.cp) return "";
  std::vector<std::vector<int>> groups, rings;
  for (const std::vector<int>& g : mesh_group_ranks(sizes, axis_bit(Axis::cp))) {
    for (size_t i = 0; i < g.size(); ++i) {  // cut as sub_axes.cpp cuts them
      if (i % static_cast<size_t>(a2a) == 0) groups.emplace_back();
      groups.back().push_back(g[i]);
    }
    for (int j = 0; j < a2a; ++j) {
      rings.emplace_back();
      for (size_t i = static_cast<size_t>(j); i < g.size(); i += static_cast<size_t>(a2a))
        rings.back().push_back(g[i]);
    }
  }
  std::ostringstream os;
  os << "hybrid cp: cp " << sizes.cp << " = " << sizes.cp / a2a << " groups x " << a2a
     << " (parallel.cp_ulysses; consecutive cp ranks, the closest links)\n";
  os << "cp_a2a groups (Ulysses all-to-all of q, k, v and out): " << braced(groups) << '\n';
  os << "cp_ring groups (ring of k, v across the groups): " << braced(rings) << '\n';
  return os.str();
}

}  // namespace mt

// Placement: which process takes which position of the device mesh, so that
// the mesh follows the machine's topology (docs/CLUSTER.md). The mesh numbers
// its positions dp outermost, tp innermost (mesh_shape.h), so a TP group is a
// run of adjacent positions; placing the positions node by node puts every
// TP group (of a size dividing the ranks per node) inside one node and lets
// DP and PP cross the nodes, whatever order mpirun numbered the processes in;
// `nodes:cp` fills a node cp first instead (the Ulysses all-to-all inside, TP
// across), `nodes:cp+dp` puts expert parallelism's all-to-all inside.
//
//   const std::vector<int> at = mesh_positions(nodes.node_of_rank, parse_placement("nodes"), sizes);
//   Group placed = place_world(world, at);  // its rank r is mesh position r
//   std::cout << mesh_node_table(sizes, at, nodes.node_of_rank, nodes.names);
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "comm/group.h"
#include "mesh/mesh_shape.h"

namespace mt {

struct RankPlacement {
  enum class Kind {
    nodes,  // positions node by node (nodes in the order of their lowest rank), ranks ascending in a node
    ranks,  // position = the process's rank as mpirun numbered it: the explicit order, e.g. --map-by
  };
  Kind kind = Kind::nodes;
  // nodes: the axes that fill a node first, innermost first (--placement
  // nodes:cp+dp); the rest follow in the default order tp, cp, pp, dp.
  std::vector<Axis> inner = {};
};
// "nodes", "nodes:AXES" (AXES: mesh axes joined by '+', each once), "ranks";
// ConfigError naming the value and the rule otherwise.
RankPlacement parse_placement(std::string_view name);
// "nodes", "nodes:cp", "ranks".
std::string placement_name(const RankPlacement& p);
// The order in which `nodes` fills a node, innermost first: p.inner, then tp,
// cp, pp, dp less those. Pure.
std::vector<Axis> node_order(const RankPlacement& p);

// Per world rank, its mesh position. Pure. Under `nodes` the k-th rank in node
// order (nodes by their lowest rank, ranks ascending in a node) takes the
// position whose coordinates are k written in mixed radix over node_order
// (its innermost axis the fastest digit): with the default order, position k.
// So a group of axis A spans (∏ sizes of the axes before A in the order) ×
// size(A) consecutive ranks, inside one node when that divides the ranks per node.
std::vector<int> mesh_positions(const std::vector<int>& node_of_rank, const RankPlacement& p,
                                const MeshSizes& sizes);

// The world reordered so that rank r of the result is mesh position r; the
// same group (no communication) when every rank keeps its position.
// Collective over `world` otherwise.
Group place_world(const Group& world, const std::vector<int>& position_of_rank);

// The rank map's node part (--print-mesh): each node with the mesh positions
// on it (and the world ranks, when placement moved them), then for each axis
// larger than one its groups with the nodes they touch, and whether every
// group of the axis stays inside one node; with ep > 1 the same for expert
// parallelism's groups (runs of ep consecutive ranks of each dp × cp group). Pure.
std::string mesh_node_table(const MeshSizes& sizes, const std::vector<int>& position_of_rank,
                            const std::vector<int>& node_of_rank, const std::vector<std::string>& names,
                            int ep = 1);
// parallel.dp_allreduce = hierarchical: each dp (× cp) group cut at the nodes,
// as comm/nodes.h split_by_node cuts it: the ranks that reduce-scatter and
// all-gather inside each node, and those that all-reduce across the nodes.
std::string hierarchical_dp_table(const MeshSizes& sizes, const std::vector<int>& position_of_rank,
                                  const std::vector<int>& node_of_rank,
                                  const std::vector<std::string>& names);

}  // namespace mt

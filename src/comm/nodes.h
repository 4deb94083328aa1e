// The job's nodes as MPI sees them: which ranks share memory (one node), and
// each node's name. meshtrain learns the topology from here, never from the
// script that started it (docs/CLUSTER.md): on a real cluster a node is a host;
// on scripts/cluster.sh's emulated one a node is a network namespace with its
// own hostname and its own Open MPI daemon.
#pragma once

#include <string>
#include <vector>

#include "comm/group.h"

namespace mt {

struct NodeMap {
  // Per world rank: the index of its node, numbered in the order of each
  // node's lowest rank (rank 0 is on node 0), and per node its name.
  std::vector<int> node_of_rank;
  std::vector<std::string> names;

  int nodes() const { return static_cast<int>(names.size()); }
  const std::string& name_of_rank(int r) const {
    return names[static_cast<size_t>(node_of_rank[static_cast<size_t>(r)])];
  }
};

// Collective over MPI_COMM_WORLD (MPI must be initialised): the boundaries from
// MPI_Comm_split_type(MPI_COMM_TYPE_SHARED), the names from
// MPI_Get_processor_name of each node's lowest rank. Two nodes that report the
// same name are told apart by a suffix "#k" (k: the node's index) rather than
// merged: the boundary is what MPI's shared-memory split says.
NodeMap discover_nodes();

// A group cut at the job's node boundaries (the hierarchical all-reduce,
// parallel/dp_allreduce.h): `node` holds the group's ranks on this rank's node,
// in group order; `across` the ranks holding this rank's index within `node`
// on every node, in node order (the order of each node's first group rank).
// `node_ranks[i]` is node i's count of the group's ranks, in that order.
struct NodeSplit {
  Group node, across;
  std::vector<int> node_ranks;
  // Per group rank, its index among the nodes above.
  std::vector<int> node_of;
};
// Collective over `group`; the sub-groups' axes are "<axis>@node" and
// "<axis>@across". ConfigError (naming the counts per node) unless every node
// holds the same number of the group's ranks. Needs the job's nodes in the
// group's context (CommContext::node_of_world_rank).
NodeSplit split_by_node(const Group& group);

}  // namespace mt

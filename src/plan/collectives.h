// The α-β time of the collectives the time model charges (plan/cost.h), and
// the shape and time of the hierarchical gradient all-reduce
// (parallel.dp_allreduce = hierarchical, parallel/dp_allreduce.h) under the
// planner's placement: mesh positions node by node in the layout's node order,
// devices_per_node each (plan/node_order.h; docs/PLANNER.md, "Time model").
#pragma once

#include <cstdint>
#include <string>

#include "plan/layout.h"
#include "plan/machine.h"

namespace mt::plan {

// A ring on `link` over `ranks` ranks: all-reduce 2(n−1)·α + 2(n−1)/n · bytes/β;
// all-gather, reduce-scatter, all-to-all (n−1)·α + (n−1)/n · bytes/β; send_recv
// α + bytes/β. 0 for one rank.
double ring_time(const AlphaBeta& link, const std::string& op, int64_t ranks, double bytes);

// Time of one collective of `bytes` (as CollectiveFit counts them) over
// `ranks` ranks: the fitted one when the machine has it — inside a node, or
// across the nodes with `flows` such groups in the same call at once (a
// calibrated cluster's fits of MPI's own collectives: the dp gradient
// reduction and ZeRO's gathers pass flows; the rank-ordered sums of tp and
// the all-to-alls, which are not MPI's algorithms, pass 0 and take the
// ring) — else ring α-β on the slowest link the group uses.
double collective_time(const Machine& m, const std::string& op, int64_t ranks, double bytes, bool inter,
                       int64_t flows = 0);

// The dp × cp group cut at the node boundaries as the trainer's split_by_node
// cuts it: g of its ranks on each of n nodes. even: every node holding any of a
// group's ranks holds g of them, for every group (the trainer refuses unequal
// nodes within a group; the time model has one g for all).
struct DpNodeSplit {
  int64_t g = 1, n = 1;
  bool even = true;
  int64_t other = 0;  // when not even: a node's count that is not g
};
// Counted on the dp × cp groups under the layout's node order (node_map,
// plan/node_order.h). Under the default order (tp, cp, pp, dp innermost first)
// and where the sizes divide, that is, with S = pp·cp·tp the distance between
// consecutive dp coordinates of a group and D the devices per node:
//   D ≥ S:            D / S whole dp blocks a node, cp members each: g = min(dp·cp, D / (pp·tp))
//   cp·tp ≤ D < S:    one pp slice of a dp block holds the group's cp members: g = cp
//   tp ≤ D < cp·tp:   D / tp consecutive cp coordinates: g = D / tp
//   D < tp:           g = 1
DpNodeSplit dp_node_split(const PlanLayout& l, int64_t devices_per_node);

// ConfigError naming the rule when `l` asks for the hierarchical all-reduce and
// the nodes would hold unequal numbers of a dp × cp group's ranks.
void check_hier_nodes(const PlanLayout& l, int64_t devices_per_node);

// The hierarchical all-reduce of `bytes` over g ranks on each of n nodes: the
// reduce-scatter over g inside the node (bytes in), the all-reduce of each
// rank's bytes / g across the n nodes on the inter link, the all-gather over g
// inside (bytes out). Under Machine::shared_link every rank of the node is in
// one such ring across at once (each dp × cp group on the node runs its own),
// so the node's devices_per_node flows share the link.
struct HierAllReduce {
  double node_s = 0;      // reduce-scatter + all-gather inside the node
  double across_s = 0;    // the all-reduce of the shard across the nodes
  double link_bytes = 0;  // what one rank sends across: 2(n−1)/n · bytes / g
  double total_s() const { return node_s + across_s; }
};
HierAllReduce hierarchical_all_reduce(const Machine& m, const DpNodeSplit& s, double bytes);
// "hierarchical grad all-reduce 12 MiB: reduce-scatter + all-gather over 4 ranks in the node, the 3 MiB
// shard all-reduced over 2 nodes (crosses nodes; 3 MiB a rank over the link)".
std::string hier_what(double grads, const DpNodeSplit& s, const HierAllReduce& h);

}  // namespace mt::plan

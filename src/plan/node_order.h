// The planner's placement: the order in which a node is filled with mesh
// positions (the trainer's --placement nodes:AXES; layout token inner=AXES),
// and the nodes that each group a layout communicates over touches under it
// (docs/PLANNER.md, "The node order").
//
// The order lists the axes innermost first: the named ones (PlanLayout::inner)
// in the order named, then the others in the default order tp, cp, pp, dp.
// Counting k = 0 … P−1 in mixed radix with that order (innermost digit first)
// gives the k-th position a node is filled with; its node is k ÷ devices per
// node. The default order is the mesh's own rank order (mesh/mesh_shape.h), so
// position k is rank k. An axis A's group is a run of consecutive k when every
// axis inner to it is whole within it: it spans (∏ sizes of the axes before A
// in the order) × size(A) positions and crosses nodes iff that span exceeds the
// devices per node (when the sizes divide).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mesh/mesh_shape.h"
#include "plan/layout.h"

namespace mt::plan {

// Innermost first: `inner`, then the others in tp, cp, pp, dp order.
std::array<Axis, kNumAxes> node_order(const std::vector<Axis>& inner);
// "cp+dp" → {cp, dp}, written as short as it can be (the named axes that the
// default order would put there anyway dropped from the end: "cp+tp" → {cp},
// "tp" → {}, the default). ConfigError naming the value and the rule for an
// empty list, an unknown axis or an axis named twice.
std::vector<Axis> parse_node_order(const std::string& axes);
// {cp, dp} → "cp+dp"; "" for the default.
std::string node_order_name(const std::vector<Axis>& inner);
// The whole order, innermost first: "cp, tp, pp, dp".
std::string node_order_text(const PlanLayout& l);

// The groups a layout communicates over (each a set of mesh positions):
//   tp, pp, dp          the ranks that differ only in that axis;
//   dp_cp               dp × cp (the gradient reduction);
//   cp_a2a, cp_ring     blocks of U = cp_a2a_size() consecutive cp coordinates, and
//                       the cp ranks equal modulo U (parallel/cp_ulysses.h);
//   ep, shard, replicas blocks of ep, and of shard_size() · cp, consecutive indices
//                       i = dp · cp + c of the dp × cp flattening (cp inner), and the
//                       indices equal modulo shard_size() · cp (mesh/sub_axes.h).
enum class PlanGroup { tp, pp, dp, dp_cp, cp_a2a, cp_ring, ep, shard, replicas };
inline constexpr int kPlanGroups = 9;
const char* plan_group_name(PlanGroup g);  // "tp", …, "cp_a2a", …

// How one kind of group sits on the nodes, counted on every group.
struct GroupNodes {
  int64_t ranks = 1;  // of one group
  int64_t nodes = 1;  // the most nodes one group touches
  int64_t g = 1;      // of mesh position 0's group, its ranks on node 0
  bool even = true;   // every node that holds any of a group's ranks holds g of them, for every group
  int64_t other = 0;  // when not even: a node's count that is not g
  bool crosses() const { return nodes > 1; }
  bool operator==(const GroupNodes&) const = default;
};

// Every kind of group of `l` on nodes of `devices_per_node` under l's node
// order, counted in one pass over the positions.
struct NodeMap {
  std::array<GroupNodes, kPlanGroups> groups = {};
  const GroupNodes& operator[](PlanGroup g) const { return groups[static_cast<size_t>(g)]; }
  bool operator==(const NodeMap&) const = default;
};
NodeMap node_map(const PlanLayout& l, int64_t devices_per_node);

// "tp, cp a2a": the groups of size > 1 that cross nodes, by name; "" when none.
std::string groups_across(const PlanLayout& l, const NodeMap& n);

}  // namespace mt::plan

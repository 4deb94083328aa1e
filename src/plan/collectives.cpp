#include "plan/collectives.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "plan/node_order.h"

namespace mt::plan {

double ring_time(const AlphaBeta& link, const std::string& op, int64_t ranks, double bytes) {
  if (ranks <= 1) return 0;
  const double n = double(ranks), share = (n - 1) / n;
  if (op == "all_reduce") return 2 * (n - 1) * link.alpha_s + 2 * share * bytes / link.bytes_per_s;
  if (op == "send_recv") return link.time(bytes);
  return (n - 1) * link.alpha_s + share * bytes / link.bytes_per_s;  // all-gather, reduce-scatter, all-to-all
}

double collective_time(const Machine& m, const std::string& op, int64_t ranks, double bytes, bool inter,
                       int64_t flows) {
  if (ranks <= 1) return 0;
  if (!inter)
    if (const CollectiveFit* f = m.fit(op, static_cast<int>(ranks))) return f->fit.time(bytes);
  if (inter && flows > 0)
    if (const CollectiveFit* f = m.fit_across(op, static_cast<int>(ranks), static_cast<int>(flows)))
      return f->fit.time(bytes);
  return ring_time(inter ? m.inter : m.intra, op, ranks, bytes);
}

DpNodeSplit dp_node_split(const PlanLayout& l, int64_t devices_per_node) {
  const GroupNodes g = node_map(l, devices_per_node)[PlanGroup::dp_cp];
  return {g.g, l.dp * l.cp / g.g, g.even, g.other};
}

void check_hier_nodes(const PlanLayout& l, int64_t devices_per_node) {
  if (!l.hier_dp) return;
  const DpNodeSplit s = dp_node_split(l, devices_per_node);
  MT_REQUIRE(s.even, ConfigError, "hier (parallel.dp_allreduce = hierarchical) needs every node to hold the ",
             "same number of each dp x cp group's ranks (the trainer's split_by_node): dp ", l.dp, " x cp ",
             l.cp, " with pp ", l.pp, " x tp ", l.tp, " on nodes of ", devices_per_node,
             " devices (node order ", node_order_text(l), ") puts ", s.g,
             " of a group's ranks on one node and ", s.other, " on another");
}

HierAllReduce hierarchical_all_reduce(const Machine& m, const DpNodeSplit& s, double bytes) {
  HierAllReduce h;
  h.node_s = collective_time(m, "reduce_scatter", s.g, bytes, false) +
             collective_time(m, "all_gather", s.g, bytes, false);
  const double shard = bytes / double(s.g), flows = m.shared_link ? double(m.devices_per_node) : 1.0;
  // A calibrated fit of the n-rank all-reduce across with a node's devices in it at once, else the ring.
  const CollectiveFit* f = m.fit_across("all_reduce", static_cast<int>(s.n), m.devices_per_node);
  h.across_s = f != nullptr ? f->fit.time(shard)
                            : ring_time(AlphaBeta{m.inter.alpha_s, m.inter.bytes_per_s / flows}, "all_reduce",
                                        s.n, shard);
  h.link_bytes = s.n > 1 ? 2 * double(s.n - 1) / double(s.n) * shard : 0.0;
  return h;
}

std::string hier_what(double grads, const DpNodeSplit& s, const HierAllReduce& h) {
  std::ostringstream os;
  os.precision(3);
  const double mib = 1 << 20;
  os << "hierarchical grad all-reduce " << grads / mib << " MiB: reduce-scatter + all-gather over " << s.g
     << " ranks in the node, the " << grads / double(s.g) / mib << " MiB shard all-reduced over " << s.n
     << (s.n > 1 ? " nodes (crosses nodes; " : " node (") << h.link_bytes / mib
     << " MiB a rank over the link)";
  return os.str();
}

}  // namespace mt::plan

#include "plan/node_order.h"

#include <algorithm>
#include <sstream>

#include "core/error.h"

namespace mt::plan {

namespace {
constexpr std::array<Axis, kNumAxes> kDefaultOrder = {Axis::tp, Axis::cp, Axis::pp, Axis::dp};
}  // namespace

std::array<Axis, kNumAxes> node_order(const std::vector<Axis>& inner) {
  std::array<Axis, kNumAxes> order{};
  size_t n = 0;
  for (Axis a : inner)
    order[n++] = a;
  for (Axis a : kDefaultOrder)
    if (std::find(inner.begin(), inner.end(), a) == inner.end()) order[n++] = a;
  return order;
}

std::vector<Axis> parse_node_order(const std::string& axes) {
  const std::string field = "--layout field 'inner=" + axes + "'";
  MT_REQUIRE(!axes.empty(), ConfigError, field,
             " names no axis (inner=AXES: mesh axes innermost first, joined by '+', e.g. inner=cp+dp)");
  std::vector<Axis> named;
  std::stringstream ss(axes);
  std::string name;
  while (std::getline(ss, name, '+')) {
    const auto known = std::find_if(kDefaultOrder.begin(), kDefaultOrder.end(),
                                    [&](Axis a) { return name == axis_name(a); });
    MT_REQUIRE(known != kDefaultOrder.end(), ConfigError, field, ": '", name,
               "' is not a mesh axis (the node order names tp, cp, pp or dp)");
    MT_REQUIRE(std::find(named.begin(), named.end(), *known) == named.end(), ConfigError, field, ": axis '",
               name, "' is named twice (the node order names each axis at most once)");
    named.push_back(*known);
  }
  MT_REQUIRE(axes.back() != '+', ConfigError, field, " ends in '+' (inner=AXES joins the axes with '+')");
  // The shortest list of the same order: "cp+tp" and "cp" fill a node alike.
  const std::array<Axis, kNumAxes> order = node_order(named);
  for (size_t n = 0; n <= named.size(); ++n) {
    const std::vector<Axis> prefix(named.begin(), named.begin() + static_cast<std::ptrdiff_t>(n));
    if (node_order(prefix) == order) return prefix;
  }
  return named;
}

namespace {
template <typename Names>
std::string joined(const Names& names, const char* sep) {
  std::ostringstream os;
  for (const auto& n : names)
    os << (os.tellp() > 0 ? sep : "") << n;
  return os.str();
}
std::vector<const char*> axis_names(const std::vector<Axis>& axes) {
  std::vector<const char*> out;
  for (Axis a : axes)
    out.push_back(axis_name(a));
  return out;
}
}  // namespace

std::string node_order_name(const std::vector<Axis>& inner) {
  return joined(axis_names(inner), "+");
}

std::string node_order_text(const PlanLayout& l) {
  const std::array<Axis, kNumAxes> order = node_order(l.inner);
  return joined(axis_names({order.begin(), order.end()}), ", ");
}

const char* plan_group_name(PlanGroup g) {
  switch (g) {
    case PlanGroup::tp:
      return "tp";
    case PlanGroup::pp:
      return "pp";
    case PlanGroup::dp:
      return "dp";
    case PlanGroup::dp_cp:
      return "dp x cp";
    case PlanGroup::cp_a2a:
      return "cp all-to-all";
    case PlanGroup::cp_ring:
      return "cp ring";
    case PlanGroup::ep:
      return "ep";
    case PlanGroup::shard:
      return "dp shard";
    case PlanGroup::replicas:
      break;
  }
  return "dp replicas";
}

namespace {

// One kind of group's ranks per node, counted as the positions come in node
// order (k ascending, so a group's nodes come in ascending order too).
struct Tally {
  std::vector<int64_t> node, count, nodes;  // per group: its current node, its ranks there, nodes touched
  GroupNodes out;
  bool first = true;  // position 0's group's count on node 0 not yet closed
  int64_t low = 0, high = 0;
  explicit Tally(int64_t groups)
      : node(static_cast<size_t>(groups), -1),
        count(static_cast<size_t>(groups), 0),
        nodes(static_cast<size_t>(groups), 0) {}
  void close(size_t id) {
    const int64_t c = count[id];
    if (first && id == 0) out.g = c, first = false;
    low = low == 0 ? c : std::min(low, c), high = std::max(high, c);
  }
  void add(int64_t group, int64_t at) {
    const size_t id = static_cast<size_t>(group);
    if (node[id] != at) {
      if (node[id] >= 0) close(id);
      node[id] = at, count[id] = 0, out.nodes = std::max(out.nodes, ++nodes[id]);
    }
    ++count[id];
  }
  GroupNodes finish(int64_t ranks) {
    for (size_t id = 0; id < node.size(); ++id)
      if (node[id] >= 0) close(id);
    out.ranks = ranks;
    out.even = low == high;
    out.other = out.even ? 0 : low != out.g ? low : high;
    return out;
  }
};

// Sub-group sizes as the mesh cuts them; 1 (the whole parent group, or each rank)
// where a size does not divide, which the trainer's rules refuse anyway.
int64_t dividing(int64_t part, int64_t whole) {
  return part >= 1 && whole % part == 0 ? part : 1;
}

}  // namespace

NodeMap node_map(const PlanLayout& l, int64_t devices_per_node) {
  const std::array<Axis, kNumAxes> order = node_order(l.inner);
  const int64_t P = l.devices(), dpn = std::max<int64_t>(1, devices_per_node), DC = l.dp * l.cp;
  const int64_t U = dividing(l.cp_a2a_size(), l.cp), ep = dividing(l.ep, DC);
  const int64_t block = dividing(l.shard_size() * l.cp, DC);
  std::vector<Tally> t(kPlanGroups, Tally(P));
  MeshCoords c{};  // indexed by Axis
  const auto size = [&](Axis a) {
    return a == Axis::dp ? l.dp : a == Axis::pp ? l.pp : a == Axis::cp ? l.cp : l.tp;
  };
  for (int64_t k = 0; k < P; ++k) {
    const int64_t d = c[axis_index(Axis::dp)], p = c[axis_index(Axis::pp)];
    const int64_t cc = c[axis_index(Axis::cp)], tp = c[axis_index(Axis::tp)], i = d * l.cp + cc;
    const int64_t stage_tp = (d * l.pp + p) * l.tp + tp;  // a cp group's key
    const int64_t id[kPlanGroups] = {
        (d * l.pp + p) * l.cp + cc,          (d * l.cp + cc) * l.tp + tp,
        (p * l.cp + cc) * l.tp + tp,         p * l.tp + tp,
        stage_tp * (l.cp / U) + cc / U,      stage_tp * U + cc % U,
        ((i / ep) * l.pp + p) * l.tp + tp,   ((i / block) * l.pp + p) * l.tp + tp,
        ((i % block) * l.pp + p) * l.tp + tp};
    for (size_t g = 0; g < kPlanGroups; ++g)
      t[g].add(id[g], k / dpn);
    for (Axis a : order) {  // the next position in node order: innermost digit first
      if (++c[axis_index(a)] < size(a)) break;
      c[axis_index(a)] = 0;
    }
  }
  const int64_t ranks[kPlanGroups] = {l.tp, l.pp, l.dp, DC, U, l.cp / U, ep, block, DC / block};
  NodeMap out;
  for (size_t g = 0; g < kPlanGroups; ++g)
    out.groups[g] = t[g].finish(ranks[g]);
  return out;
}

std::string groups_across(const PlanLayout& l, const NodeMap& n) {
  const bool hsdp = l.shard_size() < l.dp;
  const std::pair<PlanGroup, bool> used[] = {{PlanGroup::tp, l.tp > 1},
                                             {PlanGroup::cp_a2a, l.cp_a2a_size() > 1},
                                             {PlanGroup::cp_ring, l.cp_ring_size() > 1},
                                             {PlanGroup::ep, l.ep > 1},
                                             {PlanGroup::pp, l.pp > 1},
                                             {PlanGroup::dp_cp, !hsdp && l.dp * l.cp > 1},
                                             {PlanGroup::shard, hsdp},
                                             {PlanGroup::replicas, hsdp}};
  std::vector<const char*> across;
  for (const auto& [g, on] : used)
    if (on && n[g].crosses()) across.push_back(plan_group_name(g));
  return joined(across, ", ");
}

}  // namespace mt::plan

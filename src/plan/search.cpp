#include "plan/search.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>

#include "core/error.h"
#include "model/params.h"
#include "parallel/cp_ulysses.h"
#include "plan/collectives.h"
#include "plan/node_order.h"

namespace mt::plan {

namespace {

std::vector<int64_t> divisors(int64_t n, int64_t at_most) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n && i <= at_most; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// The values of one field: the fixed one, or the candidates.
std::vector<int64_t> choices(bool fixed, int64_t value, std::vector<int64_t> candidates) {
  return fixed ? std::vector<int64_t>{value} : candidates;
}

// Whether the local heads of tp split over an all-to-all of U ranks
// (parallel/cp_ulysses.h; false also when tp does not split them).
bool heads_split(const ModelConfig& model, int64_t tp, int64_t U) {
  try {
    const TpDims td = tp_dims(model, TpRank{static_cast<int>(tp), 0});
    return cp::ulysses_heads_split(td.heads, td.kv_heads, static_cast<int>(U));
  } catch (const ConfigError&) {
    return false;
  }
}

struct CpChoice {
  cp::CpImpl impl;
  int64_t a2a;
};

// cp's attentions for these sizes: at cp 1 none (ring, the default); else
// the ring, Ulysses and the hybrid of each group size U (1 < U < cp dividing
// cp) whose heads split. The one --layout pins, at each cp it can run on (any
// cp when --layout pins cp too), unfiltered by heads, so that a rule it
// breaks is refused by name.
std::vector<CpChoice> cp_choices(const PlanInput& in, const LayoutSpec& f, int64_t tp, int64_t cp) {
  const PlanLayout& x = f.layout;
  if (f.has_cp_impl) {
    const bool hybrid_fits = x.cp_a2a > 1 && x.cp_a2a < cp && cp % x.cp_a2a == 0;
    const bool fits = x.cp_impl == cp::CpImpl::hybrid ? hybrid_fits : cp > 1 || x.cp_impl == cp::CpImpl::ring;
    if (!fits && !f.has_cp) return {};
    return {{x.cp_impl, x.cp_a2a}};
  }
  std::vector<CpChoice> out{{cp::CpImpl::ring, 0}};
  if (cp == 1) return out;
  if (heads_split(in.model, tp, cp)) out.push_back({cp::CpImpl::ulysses, 0});
  for (int64_t U = 2; U < cp; ++U)
    if (cp % U == 0 && heads_split(in.model, tp, U)) out.push_back({cp::CpImpl::hybrid, U});
  return out;
}

// The dp all-reduce of `l`: flat, and also hierarchical where the trainer runs
// it (check_dp_allreduce, check_hier_nodes) and it differs from flat: g ≥ 2
// of the dp × cp group's ranks on each of n ≥ 2 nodes (with the group in one
// node, or one rank a node, there is nothing to cut). A pinned hier stays
// where a field it conflicts with is pinned too, so that its rule is refused
// by name, and is dropped where the search chose that field.
std::vector<int64_t> hier_choices(const LayoutSpec& f, const PlanLayout& l, const Machine& m) {
  const bool hsdp = l.shard > 0 && l.shard != l.dp;
  if (f.has_hier && !f.layout.hier_dp) return {0};
  if (f.has_hier) {
    const bool pinned_conflict = (l.zero > 1 && f.has_zero) || (l.ep > 1 && f.has_ep) ||
                                 (hsdp && f.has_shard) || (l.dp * l.cp == 1 && f.has_dp && f.has_cp);
    const bool conflict = l.zero > 1 || l.ep > 1 || hsdp || l.dp * l.cp == 1;
    return !conflict || pinned_conflict ? std::vector<int64_t>{1} : std::vector<int64_t>{};
  }
  if (l.zero > 1 || l.ep > 1 || hsdp || l.dp * l.cp == 1) return {0};
  const DpNodeSplit s = dp_node_split(l, m.devices_per_node);
  return s.even && s.g >= 2 && s.n >= 2 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0};
}

// The node orders worth trying for `l` (its other fields set): the default;
// inner=cp where cp and tp > 1 (cp's all-to-alls or ring inside a node, tp's
// all-reduces across); inner=cp+dp where cp and dp > 1 (the dp × cp group, and
// ep's blocks of it, inside a node); inner=dp where dp > 1 (the gradient
// reduction, and with cp 1 ep's groups, inside; tp, cp and pp across). pp
// first is not tried: its sends are a step's smallest messages, not worth a
// node that tp, cp or dp gives up for them. A pinned order: that one alone.
std::vector<std::vector<Axis>> order_choices(const LayoutSpec& f, const PlanLayout& l) {
  if (f.has_inner) return {f.layout.inner};
  std::vector<std::vector<Axis>> out{{}};
  if (l.cp > 1 && l.tp > 1) out.push_back({Axis::cp});
  if (l.cp > 1 && l.dp > 1) out.push_back({Axis::cp, Axis::dp});
  if (l.dp > 1) out.push_back({Axis::dp});
  return out;
}

// Calls `visit` for `l` under each node order, HSDP shard group and dp
// all-reduce the search tries. An order whose groups sit on the nodes as an
// earlier one's do (the same node_map: the same prediction) is skipped, so on
// one node only the default is planned. HSDP: the shard group one node's worth
// of dp ranks (under this order), when dp spans nodes.
void visit_placed(const Machine& m, const LayoutSpec& f, PlanLayout l,
                  const std::function<void(const PlanLayout&)>& visit) {
  std::vector<NodeMap> seen;
  for (const std::vector<Axis>& inner : order_choices(f, l)) {
    l.inner = inner, l.shard = 0, l.hier_dp = false;
    const int64_t per_node = node_map(l, m.devices_per_node)[PlanGroup::dp].g;
    std::vector<int64_t> shards{0};
    if (l.zero > 0 && per_node > 1 && l.dp > per_node && l.dp % per_node == 0) shards.push_back(per_node);
    for (int64_t shard : choices(f.has_shard, f.layout.shard, shards)) {
      l.shard = shard, l.hier_dp = false;
      const NodeMap nodes = node_map(l, m.devices_per_node);
      if (std::find(seen.begin(), seen.end(), nodes) != seen.end()) continue;
      seen.push_back(nodes);
      for (int64_t hier : hier_choices(f, l, m)) {
        l.hier_dp = hier != 0;
        visit(l);
      }
    }
  }
}

// Calls `visit` for every combination of the fields --layout left open.
void enumerate(const PlanInput& in, const Machine& m, const LayoutSpec& f,
               const std::function<void(const PlanLayout&)>& visit) {
  const PlanLayout& x = f.layout;
  const int64_t n = in.devices, dpn = m.devices_per_node;
  for (int64_t tp : choices(f.has_tp, x.tp, divisors(n, 2 * dpn)))
    for (int64_t pp : choices(f.has_pp, x.pp, divisors(n / std::max<int64_t>(1, tp), in.model.n_layers)))
      for (int64_t cp : choices(f.has_cp, x.cp, divisors(n / std::max<int64_t>(1, tp * pp), 16))) {
        if (tp * pp * cp == 0 || n % (tp * pp * cp) != 0) continue;
        const int64_t dp = n / (tp * pp * cp);
        if (f.has_dp && x.dp != dp) continue;
        const std::vector<int64_t> eps =
            in.model.moe() ? divisors(dp * cp, in.model.n_experts) : std::vector<int64_t>{1};
        for (const CpChoice& att : cp_choices(in, f, tp, cp))
          for (int64_t ep : choices(f.has_ep, x.ep, eps))
            for (int64_t zero : choices(f.has_zero, x.zero, {0, 1, 2, 3}))
              for (int64_t mbs : choices(f.has_mbs, x.mbs, {1, 2, 4, 8}))
                for (int64_t v :
                     choices(f.has_v, x.v, pp > 1 ? std::vector<int64_t>{1, 2, 4} : std::vector<int64_t>{1}))
                  for (int64_t rc : choices(f.has_recompute, int64_t(x.recompute), {0, 1, 2}))
                    for (int64_t sp : choices(
                             f.has_sp, x.sp, tp > 1 ? std::vector<int64_t>{1, 0} : std::vector<int64_t>{0})) {
                      // zbh1 where the split backward runs (check_split_schedule); 1f1b otherwise.
                      const bool zb_runs =
                          pp > 1 && v == 1 && tp == 1 && cp == 1 && !in.model.moe() && rc == 0;
                      for (int64_t zb :
                           choices(f.has_zb, x.zb,
                                   zb_runs ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{0}))
                        visit_placed(m, f,
                                     {dp, tp, pp, cp, ep, zero, mbs, v, sp != 0, Recompute(rc), 0, zb != 0,
                                      att.impl, att.a2a},
                                     visit);
                    }
      }
}

}  // namespace

PlanResult search(const PlanInput& in, const Machine& m, const LayoutSpec& fixed) {
  PlanResult r;
  // The memory of a layout's node orders, visited one after another, estimated once: the order
  // changes it only through hier's g (plan/memory.h), which the key holds.
  std::map<std::string, MemoryEstimate> memory;
  enumerate(in, m, fixed, [&](const PlanLayout& l) {
    try {
      PlanLayout unplaced = l;
      unplaced.inner = {};
      const std::string key =
          to_string(unplaced) +
          (l.hier_dp ? ",g" + std::to_string(dp_node_split(l, m.devices_per_node).g) : "");
      if (memory.size() > 16) memory.clear();  // the orders of one layout come together
      const auto known = memory.find(key);
      Prediction p = known != memory.end() ? predict(in, l, m, known->second) : predict(in, l, m);
      memory.emplace(key, p.memory);
      (p.fits ? r.ranked : r.too_big).push_back(std::move(p));
    } catch (const ConfigError& e) {
      if (r.invalid++ == 0) r.first_invalid_reason = to_string(l) + ": " + e.what();
    }
  });
  const auto faster = [](const Prediction& a, const Prediction& b) { return a.step_s < b.step_s; };
  std::stable_sort(r.ranked.begin(), r.ranked.end(), faster);
  std::stable_sort(r.too_big.begin(), r.too_big.end(), faster);
  return r;
}

namespace {
// Seconds by cause: compute, element-wise, bubble, optimizer, each axis's
// exposed communication.
std::map<std::string, double> causes(const Prediction& p) {
  std::map<std::string, double> c{{"compute", p.compute_s - p.recompute_s},
                                  {"recomputation", p.recompute_s},
                                  {"element-wise", p.elementwise_s},
                                  {"bubble", p.bubble_s},
                                  {"optimizer", p.optimizer_s}};
  for (const AxisComm& a : p.comm)
    c[a.axis + " exposed" + (a.crosses_nodes ? " (crosses nodes)" : "")] += a.exposed_s();
  return c;
}
}  // namespace

std::string why_slower(const Prediction& loser, const Prediction& best) {
  std::map<std::string, double> diff = causes(loser);
  for (const auto& [k, v] : causes(best))
    diff[k] -= v;
  std::vector<std::pair<double, std::string>> up;
  for (const auto& [k, v] : diff)
    if (v > 1e-4 * best.step_s) up.emplace_back(v, k);
  std::sort(up.rbegin(), up.rend());
  char buf[160];
  std::snprintf(buf, sizeof buf, "+%.1f ms (%+.1f%%):", 1e3 * (loser.step_s - best.step_s),
                100 * (loser.step_s / best.step_s - 1));
  std::string s = buf;
  for (size_t i = 0; i < up.size() && i < 3; ++i) {
    std::snprintf(buf, sizeof buf, "%s +%.1f ms %s", i ? ";" : "", 1e3 * up[i].first, up[i].second.c_str());
    s += buf;
  }
  if (up.empty()) s += " equal within rounding";
  return s;
}

std::string why_too_big(const Prediction& p, const Machine& m, int64_t devices) {
  const double gib = 1024.0 * 1024.0 * 1024.0;
  const double limit = m.rank_memory_bytes(devices);
  char buf[200];
  std::snprintf(buf, sizeof buf, "does not fit: %.1f GiB > %.1f GiB (largest: %s %.1f GiB)",
                double(p.memory.total) / gib, limit / gib, p.memory.largest().first.c_str(),
                double(p.memory.largest().second) / gib);
  return buf;
}

}  // namespace mt::plan

#include "plan/print.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "plan/memory.h"
#include "plan/node_order.h"

namespace mt::plan {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

std::string fmt(const char* f, double a, double b = 0, double c = 0) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, a, b, c);
  return buf;
}

double tokens_per_s(const PlanInput& in, const Prediction& p) {
  return double(in.global_batch * in.seq_len) / p.step_s;
}
}  // namespace

std::string format_prediction(const PlanInput& in, const Prediction& p, const Machine& m) {
  std::ostringstream os;
  os << "layout " << to_string(p.layout) << "  (" << p.microbatches << " microbatches per step)\n";
  if (in.devices > m.devices_per_node) {  // which groups the node order sends over the link
    const std::string across = groups_across(p.layout, node_map(p.layout, m.devices_per_node));
    const std::string inner = node_order_name(p.layout.inner);
    os << "  nodes of " << m.devices_per_node << " filled " << node_order_text(p.layout)
       << " innermost first (--placement nodes" << (inner.empty() ? "" : ":" + inner)
       << "); groups across nodes: " << (across.empty() ? "none" : across) << "\n";
  }
  os << fmt("  step %.4g s   %.4g tokens/s   MFU %.3f", p.step_s, tokens_per_s(in, p), p.mfu) << "\n";
  os << fmt("  compute %.4g s (recomputation %.4g s)   element-wise %.4g s", p.compute_s, p.recompute_s,
            p.elementwise_s)
     << fmt("   optimizer %.4g s\n", p.optimizer_s);
  if (p.layout.zb) {
    os << fmt("  bubble %.4g s = %.1f%% of the pipeline's time (zbh1: (p-1)/(3m+p-1) = ", p.bubble_s,
              100 * p.bubble_fraction)
       << p.layout.pp - 1 << "/" << 3 * p.microbatches + p.layout.pp - 1 << " at F = B = W)\n";
  } else {
    os << fmt("  bubble %.4g s = %.1f%% of the pipeline's time ((p-1)/(m*v+p-1) = ", p.bubble_s,
              100 * p.bubble_fraction)
       << p.layout.pp - 1 << "/" << p.microbatches * p.layout.v + p.layout.pp - 1 << ")\n";
  }
  os << "  memory per rank (" << m.precision << "):\n";
  for (const auto& [name, bytes] : p.memory.parts)
    os << "    " << name << std::string(name.size() < 16 ? 16 - name.size() : 1, ' ')
       << fmt("%9.3f GiB\n", double(bytes) / kGiB);
  os << "    total" << std::string(11, ' ') << fmt("%9.3f GiB", double(p.memory.total) / kGiB)
     << (p.fits ? "  fits in " : "  DOES NOT FIT in ")
     << fmt("%.1f GiB\n", m.rank_memory_bytes(in.devices) / kGiB);
  if (!p.comm.empty()) os << "  communication per step (total / hidden / exposed):\n";
  for (const AxisComm& a : p.comm)
    os << "    " << a.axis << fmt("  %8.4g s / %8.4g s / %8.4g s  ", a.total_s, a.hidden_s, a.exposed_s())
       << a.what << "\n";
  return os.str();
}

std::string format_ranking(const PlanInput& in, const PlanResult& r, const Machine& m, int top) {
  std::ostringstream os;
  os << precision_note(m.precision) << "\n";
  os << r.ranked.size() << " layouts fit, " << r.too_big.size() << " do not fit in memory, " << r.invalid
     << " break a rule of the trainer\n\n";
  for (size_t i = 0; i < r.ranked.size() && i < size_t(top); ++i) {
    os << "#" << i + 1 << " " << format_prediction(in, r.ranked[i], m);
    if (i > 0) os << "  why it lost to #1: " << why_slower(r.ranked[i], r.ranked[0]) << "\n";
    os << "\n";
  }
  // Faster layouts that do not fit: what the memory limit costs.
  int shown = 0;
  for (const Prediction& p : r.too_big) {
    if (!r.ranked.empty() && p.step_s >= r.ranked[0].step_s) break;
    if (shown++ == 0) os << "faster, but out of memory:\n";
    if (shown > top) break;
    os << "  " << to_string(p.layout) << fmt(": %.4g s, ", p.step_s) << why_too_big(p, m, in.devices) << "\n";
  }
  return os.str();
}

std::string format_scaling(const PlanInput& in, const std::vector<ScalingRow>& rows) {
  std::ostringstream os;
  os << "scaling (" << in.seq_len << " tokens per sequence)\n";
  os << "kind    devices  batch  step s      tokens/s    tokens/s/device  MFU    layout\n";
  for (const ScalingRow& r : rows) {
    char buf[256];
    if (!r.found) {
      std::snprintf(buf, sizeof buf, "%-7s %7lld %6lld  (no layout fits)\n", r.kind.c_str(),
                    (long long)r.devices, (long long)r.global_batch);
    } else {
      const double tps = double(r.global_batch * in.seq_len) / r.best.step_s;
      std::snprintf(buf, sizeof buf, "%-7s %7lld %6lld  %-10.4g  %-10.4g  %-15.4g  %.3f  %s\n",
                    r.kind.c_str(), (long long)r.devices, (long long)r.global_batch, r.best.step_s, tps,
                    tps / double(r.devices), r.best.mfu, to_string(r.best.layout).c_str());
    }
    os << buf;
  }
  return os.str();
}

namespace {
nlohmann::json to_json(const PlanInput& in, const Prediction& p) {
  nlohmann::json mem = nlohmann::json::object(), comm = nlohmann::json::array();
  for (const auto& [name, bytes] : p.memory.parts)
    mem[name] = bytes;
  for (const AxisComm& a : p.comm)
    comm.push_back({{"axis", a.axis},
                    {"what", a.what},
                    {"bytes", a.bytes},
                    {"total_s", a.total_s},
                    {"hidden_s", a.hidden_s},
                    {"exposed_s", a.exposed_s()},
                    {"crosses_nodes", a.crosses_nodes}});
  return {{"layout", to_string(p.layout)},
          {"step_s", p.step_s},
          {"tokens_per_s", double(in.global_batch * in.seq_len) / p.step_s},
          {"mfu", p.mfu},
          {"microbatches", p.microbatches},
          {"compute_s", p.compute_s},
          {"recompute_s", p.recompute_s},
          {"elementwise_s", p.elementwise_s},
          {"bubble_s", p.bubble_s},
          {"bubble_fraction", p.bubble_fraction},
          {"optimizer_s", p.optimizer_s},
          {"memory_bytes", mem},
          {"memory_total_bytes", p.memory.total},
          {"fits", p.fits},
          {"comm", comm}};
}
}  // namespace

std::string prediction_json(const PlanInput& in, const Prediction& p, const Machine& m) {
  nlohmann::json j = to_json(in, p);
  j["machine"] = m.name;
  return j.dump() + "\n";
}

std::string plan_json(const PlanInput& in, const PlanResult& r, const Machine& m, int top,
                      const std::vector<ScalingRow>& scaling) {
  nlohmann::json j = {{"machine", m.name},
                      {"precision", m.precision},
                      {"devices", in.devices},
                      {"global_batch", in.global_batch},
                      {"seq_len", in.seq_len}};
  j["best"] = nlohmann::json::array();
  for (size_t i = 0; i < r.ranked.size() && i < size_t(top); ++i)
    j["best"].push_back(to_json(in, r.ranked[i]));
  j["scaling"] = nlohmann::json::array();
  for (const ScalingRow& s : scaling) {
    nlohmann::json row = {{"kind", s.kind}, {"devices", s.devices}, {"global_batch", s.global_batch}};
    if (s.found) row["best"] = to_json(in, s.best);
    j["scaling"].push_back(row);
  }
  return j.dump(1) + "\n";
}

}  // namespace mt::plan

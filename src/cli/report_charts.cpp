// The report's charts, from the metrics lines (docs/FORMATS.md "Metrics file").
#include <algorithm>
#include <map>
#include <string>

#include "cli/report.h"

namespace mt::report {

namespace {
using json = nlohmann::json;

json point(double x, double y, const std::string& s) {
  return {{"x", x}, {"y", y}, {"s", s}};
}
json bar(const std::string& c, const std::string& p, double v) {
  return {{"c", c}, {"p", p}, {"v", v}};
}
double num(const json& j, const char* key, double fallback = 0.0) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

Chart losses(const std::vector<Run>& runs) {
  json rows = json::array();
  for (const Run& r : runs) {
    for (const json& s : r.steps)
      rows.push_back(point(num(s, "step"), num(s, "loss"), r.name + " train"));
    for (const json& v : r.vals)
      rows.push_back(point(num(v, "step"), num(v, "val_loss"), r.name + " validation"));
  }
  return {"Training and validation loss",
          "Mean next-token loss over the global batch per step; validation "
          "every train.eval_every steps.",
          line_spec(rows, "step", "loss")};
}

Chart step_times(const std::vector<Run>& runs) {
  json rows = json::array();
  for (const Run& r : runs)
    for (const json& s : r.steps)
      rows.push_back(point(num(s, "step"), num(s, "step_time_s") * 1e3, r.name));
  return {"Step time", "Rank 0's wall time per step.", line_spec(rows, "step", "ms")};
}

// The steps a mean is taken over: all but the first (its warm-up) when there are more.
bool counted(const json& line, int64_t first_step, size_t n_steps) {
  return n_steps <= 1 || line.value("step", int64_t{0}) > first_step;
}

Chart breakdown(const std::vector<Run>& runs) {
  json rows = json::array();
  for (const Run& r : runs) {
    const auto first = r.steps.front().value("step", int64_t{0});
    if (r.ranks.empty()) {  // a file written before the rank lines
      double sum = 0, n = 0;
      for (const json& s : r.steps)
        if (counted(s, first, r.steps.size())) sum += num(s, "step_time_s"), n += 1;
      rows.push_back(bar(r.name, "step (not split)", 1e3 * sum / std::max(n, 1.0)));
      continue;
    }
    std::map<int64_t, std::map<std::string, double>> sums;  // rank → part → ms
    std::map<int64_t, double> n;
    for (const json& l : r.ranks) {
      if (!counted(l, first, r.steps.size())) continue;
      const json& t = l["time_s"];
      auto& m = sums[l.value("rank", int64_t{0})];
      m["compute"] += 1e3 * num(t, "compute");
      m["optimizer"] += 1e3 * num(t, "optimizer");
      m["pipeline bubble"] += 1e3 * num(t, "pipeline_idle");
      for (const auto& [axis, s] : field(t, "comm_exposed").items())
        m["comm " + axis] += 1e3 * s.get<double>();
      n[l.value("rank", int64_t{0})] += 1;
    }
    for (const auto& [rank, parts] : sums)
      for (const auto& [part, ms] : parts)
        rows.push_back(bar(r.name + " rank " + std::to_string(rank), part, ms / n[rank]));
  }
  return {"Step time breakdown per rank",
          "Mean over the steps after the first: compute, communication this rank waited for (exposed) by "
          "axis, the pipeline bubble, the optimizer (docs/FORMATS.md, rank lines).",
          stacked_spec(rows, "ms per step")};
}

Chart bytes(const std::vector<Run>& runs) {
  json rows = json::array();
  for (const Run& r : runs)
    for (const json& s : r.steps) {
      std::map<std::string, double> by_axis;
      for (const auto& [key, b] : field(s, "comm_bytes").items())
        by_axis[key.substr(key.find('/') + 1)] += b.get<double>();
      for (const auto& [axis, b] : by_axis)
        rows.push_back(point(num(s, "step"), b / (1 << 20), r.name + " " + axis));
    }
  return {"Bytes per axis per step",
          "Rank 0's send-side bytes of its collectives and transfers, by mesh axis.",
          line_spec(rows, "step", "MiB")};
}
}  // namespace

// Memory: each rank's peak by kind (max over steps) beside the analytic model.
Chart memory_chart(const std::vector<Run>& runs);
// The pipeline bubble against (pp − 1) / (v·m + pp − 1), for runs with pp > 1.
Chart bubble_chart(const std::vector<Run>& runs);
// Tokens routed to each expert per MoE layer, the last step, for MoE runs.
Chart expert_chart(const std::vector<Run>& runs);

// The planner's scaling tables: predicted tokens/s per device against devices.
Chart scaling_chart(const std::vector<Plan>& plans);

std::vector<Chart> make_charts(const std::vector<Run>& runs, const std::vector<Plan>& plans) {
  std::vector<Chart> out;
  if (!runs.empty()) out = {losses(runs), breakdown(runs), step_times(runs)};
  for (Chart c : {comm_time_chart(runs), bytes(runs), memory_chart(runs), bubble_chart(runs), expert_chart(runs), scaling_chart(plans)})
    if (!c.spec.is_null() && !c.spec["data"][0]["values"].empty()) out.push_back(std::move(c));
  return out;
}

}  // namespace mt::report

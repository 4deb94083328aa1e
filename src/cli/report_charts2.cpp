// The report's memory, pipeline and expert charts (report.h).
#include <algorithm>
#include <map>
#include <string>

#include "cli/report.h"
#include "pipeline/simulate.h"

namespace mt::report {

namespace {
using json = nlohmann::json;

const json& config_of(const Run& r, const char* section) {
  static const json empty = json::object();
  if (!r.header.is_object() || !r.header.contains("config") || !r.header["config"].contains(section))
    return empty;
  return r.header["config"][section];
}
}  // namespace

Chart memory_chart(const std::vector<Run>& runs) {
  json rows = json::array();
  for (const Run& r : runs) {
    std::map<int64_t, std::map<std::string, double>> peak;  // rank → kind → MiB
    if (r.ranks.empty())                                    // older files: rank 0's step lines
      for (const json& s : r.steps)
        for (const auto& [kind, b] : field(s, "mem_peak_by_kind").items())
          peak[0][kind] = std::max(peak[0][kind], b.get<double>() / (1 << 20));
    for (const json& l : r.ranks)
      for (const auto& [kind, b] : field(l, "mem_peak_by_kind").items()) {
        double& p = peak[l.value("rank", int64_t{0})][kind];
        p = std::max(p, b.get<double>() / (1 << 20));
      }
    for (const auto& [rank, kinds] : peak)
      for (const auto& [kind, mib] : kinds)
        rows.push_back({{"c", r.name + " rank " + std::to_string(rank)}, {"p", kind}, {"v", mib}});
    const json& model =
        r.header.is_object() && r.header.contains("memory_model") ? r.header["memory_model"] : json::object();
    if (model.contains("ranks"))  // every rank's model (its upper figure), beside that rank's peaks
      for (const json& m : model["ranks"])
        for (const auto& [kind, b] : field(m, "upper").items())
          rows.push_back({{"c", r.name + " rank " + std::to_string(m.value("rank", int64_t{0})) + " model"},
                          {"p", kind},
                          {"v", b.get<double>() / (1 << 20)}});
    else if (model.contains("per_rank"))
      for (const auto& [kind, b] : field(model, "per_rank").items())
        rows.push_back(
            {{"c", r.name + " model"}, {"p", "model: " + kind}, {"v", b.get<double>() / (1 << 20)}});
    std::map<int64_t, double> rss;  // rank → resident peak, MiB: what the allocator does not track shows
    for (const json& l : r.ranks)
      if (l.contains("rss_peak_bytes"))
        rss[l.value("rank", int64_t{0})] =
            std::max(rss[l.value("rank", int64_t{0})], l["rss_peak_bytes"].get<double>() / (1 << 20));
    for (const auto& [rank, mib] : rss)
      rows.push_back(
          {{"c", r.name + " rank " + std::to_string(rank) + " resident"}, {"p", "resident"}, {"v", mib}});
  }
  return {"Memory per rank by kind, against the analytic model",
          "Each rank's peak tracked bytes by kind over the run (the sum of per-kind peaks bounds the total "
          "peak), beside the memory model's figure for that rank (cost/memory_model.h; its upper bound per "
          "kind) and the process's resident peak (VmHWM, which includes what the allocator does not track).",
          stacked_spec(rows, "MiB")};
}

Chart bubble_chart(const std::vector<Run>& runs) {
  json rows = json::array();
  for (const Run& r : runs) {
    const json& p = config_of(r, "parallel");
    const json& t = config_of(r, "train");
    const double pp = p.value("pp", 1.0);
    if (pp <= 1) continue;
    const double dp = p.value("dp", 1.0), v = p.value("virtual_stages", 1.0);
    const double m = t.value("batch_size", 1.0) / (dp * t.value("microbatch_size", 1.0));
    const double theory = pp::ideal_bubble(
        static_cast<int>(pp), p.value("schedule", std::string()) == "interleaved" ? static_cast<int>(v) : 1,
        static_cast<int>(m));
    for (const json& s : r.steps) {
      const std::vector<double> idle = s.value("pp_idle", std::vector<double>{});
      if (idle.empty()) continue;
      double mean = 0;
      for (double x : idle)
        mean += x / static_cast<double>(idle.size());
      rows.push_back({{"x", s["step"]}, {"y", 100 * mean}, {"s", r.name + " measured (mean over stages)"}});
      rows.push_back({{"x", s["step"]}, {"y", 100 * theory}, {"s", r.name + " theory (pp-1)/(v*m+pp-1)"}});
    }
  }
  return {"Pipeline bubble against theory",
          "Each stage's share of the executor's time outside forward and backward, averaged over the stages, "
          "beside the schedule's ideal bubble with free communication (docs/PARALLELISM.md).",
          line_spec(rows, "step", "% of the step")};
}

Chart expert_chart(const std::vector<Run>& runs) {
  json rows = json::array();
  for (const Run& r : runs) {
    const json& last = r.steps.back();
    if (!last.contains("moe_tokens_per_expert")) continue;
    for (const auto& [layer, counts] : last["moe_tokens_per_expert"].items()) {
      int e = 0;
      for (const json& c : counts)
        rows.push_back({{"c", r.name + " layer " + layer}, {"p", "expert " + std::to_string(e++)}, {"v", c}});
    }
  }
  return {"Expert load (last step)",
          "Tokens routed to each expert in each MoE layer, over every rank's tokens (docs/MODEL.md).",
          stacked_spec(rows, "tokens")};
}

Chart scaling_chart(const std::vector<Plan>& plans) {
  json rows = json::array();
  for (const Plan& p : plans)
    for (const json& r : p.j["scaling"]) {
      if (!r.contains("best")) continue;  // no layout fits at this size
      const double devices = r.value("devices", 1.0);
      rows.push_back({{"x", devices},
                      {"y", field(r, "best").value("tokens_per_s", 0.0) / devices},
                      {"s", p.name + " " + r.value("kind", std::string())}});
    }
  if (rows.empty()) return {};
  return {
      "Planned strong and weak scaling",
      "The planner's best layout at each device count (meshtrain plan --scaling, docs/PLANNER.md): predicted "
      "tokens/s per device. Strong scaling keeps the global batch, weak scaling grows it with the devices; "
      "a flat line is perfect scaling, a falling one is what communication and the pipeline bubble cost.",
      line_spec(rows, "devices", "tokens/s per device")};
}

}  // namespace mt::report

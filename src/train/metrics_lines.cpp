#include "train/metrics_lines.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "comm/context.h"
#include "core/memory.h"
#include "cost/memory_estimate.h"
#include "cost/memory_model.h"
#include "train/explain.h"

namespace mt {

namespace {

nlohmann::json typed(const std::string& type, const std::string& text) {
  if (type == "int") return std::stoll(text);
  if (type == "float") return std::stod(text);
  if (type == "bool") return text == "true";
  return text;
}

// The pipeline executor's own transfers: their waits are the bubble
// (pipeline_idle), not exposed communication.
bool pipeline_transfer(const LedgerEntry& e) {
  return e.axis == "pp" && (e.op == "send" || e.op == "recv");
}

}  // namespace

nlohmann::json metrics_header(const Config& cfg, int world_size) {
  nlohmann::json config = nlohmann::json::object();
  for (const ConfigKey& k : config_keys()) {
    const size_t dot = k.name.find('.');
    config[k.name.substr(0, dot)][k.name.substr(dot + 1)] = typed(k.type, config_get(cfg, k.name));
  }
  const MemoryEstimate est = estimate_training_memory(cfg);
  nlohmann::json parts = nlohmann::json::object();
  for (const auto& [kind, bytes] : est.parts)
    parts[kind] = parts.value(kind, int64_t{0}) + bytes;
  nlohmann::json ranks = nlohmann::json::array();  // every rank's model, by the allocator's kinds
  for (const RankMemory& r : estimate_all_ranks(cfg)) {
    nlohmann::json lower = nlohmann::json::object(), upper = nlohmann::json::object();
    for (int k = 0; k < kNumMemKinds; ++k) {
      const std::string kind(mem_kind_name(static_cast<MemKind>(k)));
      lower[kind] = r.lower[static_cast<size_t>(k)];
      upper[kind] = r.upper[static_cast<size_t>(k)];
    }
    ranks.push_back({{"rank", r.rank}, {"lower", lower}, {"upper", upper}});
  }
  return {{"header",
           {{"format", 1},
            {"world_size", world_size},
            {"config", config},
            {"memory_model", {{"per_rank", parts}, {"total", est.total}, {"ranks", ranks}}}}}};
}

bool is_header_line(const std::string& line) {
  return line.rfind("{\"header\":", 0) == 0;
}

nlohmann::json rank_line(const RunMesh& mesh, const TrainModel& model, const StepStats& s) {
  const double end = s.start_s + s.step_time_s, opt_end = s.optimizer_start_s + s.optimizer_s;
  std::map<std::string, double> exposed;
  std::map<std::string, int64_t> bytes, links;  // per axis; per link (node | across; context.h)
  double opt_waits = 0;
  if (mesh.world()) {
    for (const LedgerEntry& e : mesh.world()->context().ledger.step_entries(s.step)) {
      if (e.end_s < s.start_s || e.end_s > end) continue;  // the reports after the step
      bytes[e.axis] += e.bytes;
      if (!e.link.empty()) links[e.link] += e.bytes;
      if (pipeline_transfer(e)) continue;
      exposed[e.axis] += e.wait_seconds;
      if (e.end_s >= s.optimizer_start_s && e.end_s <= opt_end) opt_waits += e.wait_seconds;
    }
  }
  const pp::Executor& ex = *model.executor;
  const double idle = model.pipelined() ? std::max(0.0, ex.wall_s() - ex.busy_s()) : 0.0;
  const double optimizer = std::max(0.0, s.optimizer_s - opt_waits);
  double comm = 0;
  for (const auto& [axis, t] : exposed)
    comm += t;
  const MemStats mem = MemoryTracker::stats();
  nlohmann::json by_kind = nlohmann::json::object();
  for (int k = 0; k < kNumMemKinds; ++k)
    by_kind[std::string(mem_kind_name(static_cast<MemKind>(k)))] = mem.peak[static_cast<size_t>(k)];
  return {
      {"step", s.step},
      {"rank", mesh.rank},
      {"coords", {{"dp", mesh.dp_rank}, {"pp", mesh.pp_rank}, {"cp", mesh.cp_rank}, {"tp", mesh.tp_rank}}},
      {"time_s",
       {{"step", s.step_time_s},
        {"compute", std::max(0.0, s.step_time_s - comm - idle - optimizer)},
        {"comm_exposed", exposed},
        {"pipeline_idle", idle},
        {"optimizer", optimizer}}},
      {"cpu_s", s.cpu_s},
      {"comm_bytes_by_axis", bytes},
      {"comm_bytes_by_link", links},
      {"mem_peak_by_kind", by_kind},
      {"mem_peak_total", mem.total_peak},
      {"rss_peak_bytes", resident_bytes(true)}};
}

void write_rank_lines(MetricsWriter& metrics, const RunMesh& mesh, const TrainModel& model,
                      const StepStats& s, bool on) {
  if (!on) return;
  const std::string mine = rank_line(mesh, model, s).dump() + "\n";
  const std::string all = mesh.world() ? gather_to_rank0(*mesh.world(), mine, "metrics: rank lines") : mine;
  if (mesh.rank != 0) return;
  std::istringstream in(all);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) metrics.write_line(line);
}

}  // namespace mt

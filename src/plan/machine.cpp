#include "plan/machine.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"

namespace mt::plan {

int Machine::measured_ranks(int ranks_on_node) const {
  int below = 0, smallest = 0;
  const auto consider = [&](int r) {
    if (r <= 0) return;
    if (r <= ranks_on_node) below = std::max(below, r);
    smallest = smallest == 0 ? r : std::min(smallest, r);
  };
  for (const GemmRate& g : gemm)
    consider(g.ranks);
  for (const LayerKernels& k : kernels)
    consider(k.ranks);
  return below > 0 ? below : smallest;
}

double Machine::gemm_rate(int64_t m, int64_t n, int64_t k, int ranks_on_node) const {
  // Without measurements: the roofline of the shape, the smaller of the
  // achievable compute rate and (FLOPs per byte moved) × the memory rate.
  const double el = precision == "bf16" ? 2.0 : 4.0, M = double(m), N = double(n), K = double(k);
  const double intensity = 2 * M * N * K / (el * (M * K + K * N + M * N));
  double rate = std::min(peak_flops * gemm_efficiency, intensity * memory_bytes_per_s);
  double best = std::numeric_limits<double>::infinity();
  const int r = measured_ranks(ranks_on_node);
  for (const GemmRate& g : gemm) {  // nearest measured shape, distance in log-space
    if (g.ranks != 0 && g.ranks != r) continue;
    const double d = std::fabs(std::log(double(m) / double(g.m))) +
                     std::fabs(std::log(double(n) / double(g.n))) +
                     std::fabs(std::log(double(k) / double(g.k)));
    if (d < best) best = d, rate = g.flops_per_s;
  }
  return shared_compute ? rate / std::max(1, ranks_on_node) : rate;
}

const LayerKernels* Machine::layer_kernels(int ranks_on_node) const {
  const int r = measured_ranks(ranks_on_node);
  for (const LayerKernels& k : kernels)
    if (k.attention_s > 0 && (k.ranks == 0 || k.ranks == r)) return &k;
  return nullptr;
}

double Machine::rank_memory_bytes(int64_t devices) const {
  if (!shared_compute) return memory_bytes;
  return memory_bytes / double(std::max<int64_t>(1, std::min<int64_t>(devices, devices_per_node)));
}

const CollectiveFit* Machine::fit(const std::string& op, int ranks) const {
  for (const CollectiveFit& c : collectives)
    if (!c.across && c.op == op && c.ranks == ranks) return &c;
  return nullptr;
}

const CollectiveFit* Machine::fit_across(const std::string& op, int ranks, int flows) const {
  for (const CollectiveFit& c : collectives)
    if (c.across && c.op == op && c.ranks == ranks && c.flows == flows) return &c;
  return nullptr;
}

namespace {

// One 8-device node type with a per-device link inside and one NIC per device
// between nodes. Every number is cited in docs/PLANNER.md, "Built-in profiles".
Machine gpu_node(std::string name, std::string description, double peak, double efficiency, double mem,
                 double mem_bw, double intra_bw, double inter_bw) {
  Machine m;
  m.name = std::move(name);
  m.description = std::move(description);
  m.devices_per_node = 8;
  m.peak_flops = peak;
  m.gemm_efficiency = efficiency;
  m.memory_bytes = mem;
  m.memory_bytes_per_s = mem_bw;
  // Assumptions (docs/PLANNER.md): 5 and 10 µs per ring step within and
  // between nodes; collectives reach 80% of a link's nominal rate.
  m.intra = {5e-6, 0.8 * intra_bw};
  m.inter = {10e-6, 0.8 * inter_bw};
  m.overlap = 1.0;
  m.precision = "bf16";
  return m;
}

std::vector<Machine> builtin_machines() {
  return {
      gpu_node(
          "a100-8x-ib",
          "8 x A100 SXM4 80GB per node, NVLink 3 (600 GB/s per GPU), 8 x HDR 200 Gb/s InfiniBand per node",
          312e12, 0.8, 80e9, 2.039e12, 300e9, 25e9),
      gpu_node("h100-8x-ib",
               "8 x H100 SXM5 80GB per node, NVLink 4 (900 GB/s per GPU), 400 Gb/s NDR InfiniBand per GPU",
               989e12, 0.7, 80e9, 3.35e12, 450e9, 50e9),
      gpu_node("h200-8x-ib",
               "8 x H200 SXM 141GB per node, NVLink 4 (900 GB/s per GPU), 400 Gb/s NDR InfiniBand per GPU",
               989e12, 0.7, 141e9, 4.8e12, 450e9, 50e9),
      gpu_node("ascend910b-8x",
               "8 x Ascend 910B 64GB per node, HCCS full mesh (392 GB/s per NPU), 200 Gb/s RoCE per NPU",
               313e12, 0.7, 64e9, 1.6e12, 196e9, 25e9),
  };
}

nlohmann::json ab_json(const AlphaBeta& a) {
  return {{"alpha_s", a.alpha_s}, {"bytes_per_s", a.bytes_per_s}};
}
AlphaBeta alpha_beta(const nlohmann::json& j) {
  AlphaBeta a{j.at("alpha_s").get<double>(), j.at("bytes_per_s").get<double>()};
  MT_REQUIRE(a.alpha_s >= 0 && a.bytes_per_s > 0, ConfigError,
             "a link needs alpha_s >= 0 and bytes_per_s > 0, got ", j.dump());
  return a;
}

LayerKernels layer_kernels_from_json(const nlohmann::json& k) {
  LayerKernels l;
  l.batch = k.at("batch").get<int64_t>(), l.seq_len = k.at("seq_len").get<int64_t>();
  l.d_model = k.at("d_model").get<int64_t>(), l.ffn_hidden = k.at("ffn_hidden").get<int64_t>();
  l.heads = k.at("heads").get<int64_t>();
  l.attention_s = k.at("attention_s").get<double>(), l.elementwise_s = k.at("elementwise_s").get<double>();
  l.attention_half_s = k.value("attention_half_s", 0.0);
  l.optimizer_s = k.value("optimizer_s", 0.0);
  l.ranks = k.value("ranks", 0), l.threads = k.value("threads", 0);
  return l;
}

}  // namespace

std::vector<std::string> builtin_machine_names() {
  std::vector<std::string> names;
  for (const Machine& m : builtin_machines())
    names.push_back(m.name);
  return names;
}

Machine load_machine(const std::string& name_or_file) {
  for (const Machine& m : builtin_machines())
    if (m.name == name_or_file) return m;
  std::error_code ec;
  if (!std::filesystem::exists(name_or_file, ec)) {
    std::string known;
    for (const std::string& n : builtin_machine_names())
      known += (known.empty() ? "" : ", ") + n;
    MT_THROW(ConfigError, "--machine '", name_or_file, "' is neither a built-in profile (", known,
             ") nor a readable machine file (meshtrain calibrate --out FILE writes one)");
  }
  return machine_from_json(read_file(name_or_file, kMaxConfigFile, "machine file"), name_or_file);
}

Machine machine_from_json(const std::string& text, const std::string& source) {
  Machine m;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    m.name = j.at("name").get<std::string>();
    m.description = j.value("description", "");
    m.devices_per_node = j.at("devices_per_node").get<int>();
    m.peak_flops = j.at("peak_flops").get<double>();
    m.gemm_efficiency = j.value("gemm_efficiency", 1.0);
    m.shared_compute = j.value("shared_compute", false);
    m.memory_bytes = j.at("memory_bytes").get<double>();
    m.memory_bytes_per_s = j.at("memory_bytes_per_s").get<double>();
    m.intra = alpha_beta(j.at("intra"));
    m.inter = alpha_beta(j.at("inter"));
    m.shared_link = j.value("shared_link", false);
    m.overlap = j.value("overlap", 1.0);
    m.precision = j.value("precision", "bf16");
    for (const auto& g : j.value("gemm", nlohmann::json::array()))
      m.gemm.push_back({g.at("m").get<int64_t>(), g.at("n").get<int64_t>(), g.at("k").get<int64_t>(),
                        g.at("flops_per_s").get<double>(), g.value("ranks", 0), g.value("threads", 0)});
    for (const auto& c : j.value("collectives", nlohmann::json::array()))
      m.collectives.push_back({c.at("op").get<std::string>(), c.at("ranks").get<int>(), alpha_beta(c),
                               c.value("across", false), c.value("flows", 1)});
    if (j.contains("kernels")) {  // a list, one per number of ranks; one object in older files
      const nlohmann::json& ks = j.at("kernels");
      for (const auto& k : ks.is_array() ? ks : nlohmann::json::array({ks}))
        m.kernels.push_back(layer_kernels_from_json(k));
    }
  } catch (const nlohmann::json::exception& e) {
    MT_THROW(ConfigError, "machine file ", source, ": ", e.what());
  }
  MT_REQUIRE(m.devices_per_node >= 1 && m.peak_flops > 0 && m.memory_bytes > 0 && m.memory_bytes_per_s > 0,
             ConfigError, "machine file ", source,
             ": devices_per_node, peak_flops, memory_bytes and memory_bytes_per_s must be positive");
  MT_REQUIRE(m.precision == "bf16" || m.precision == "fp32", ConfigError, "machine file ", source,
             ": precision must be bf16 or fp32, got '", m.precision, "'");
  return m;
}

std::string machine_to_json(const Machine& m) {
  nlohmann::json j = {{"name", m.name},
                      {"description", m.description},
                      {"devices_per_node", m.devices_per_node},
                      {"peak_flops", m.peak_flops},
                      {"gemm_efficiency", m.gemm_efficiency},
                      {"shared_compute", m.shared_compute},
                      {"memory_bytes", m.memory_bytes},
                      {"memory_bytes_per_s", m.memory_bytes_per_s},
                      {"intra", ab_json(m.intra)},
                      {"inter", ab_json(m.inter)},
                      {"shared_link", m.shared_link},
                      {"overlap", m.overlap},
                      {"precision", m.precision}};
  j["gemm"] = nlohmann::json::array();
  for (const GemmRate& g : m.gemm)
    j["gemm"].push_back({{"m", g.m},
                         {"n", g.n},
                         {"k", g.k},
                         {"flops_per_s", g.flops_per_s},
                         {"ranks", g.ranks},
                         {"threads", g.threads}});
  j["collectives"] = nlohmann::json::array();
  for (const CollectiveFit& c : m.collectives)
    j["collectives"].push_back({{"op", c.op},
                                {"ranks", c.ranks},
                                {"alpha_s", c.fit.alpha_s},
                                {"bytes_per_s", c.fit.bytes_per_s},
                                {"across", c.across},
                                {"flows", c.flows}});
  j["kernels"] = nlohmann::json::array();
  for (const LayerKernels& k : m.kernels)
    j["kernels"].push_back({{"batch", k.batch},
                            {"seq_len", k.seq_len},
                            {"d_model", k.d_model},
                            {"ffn_hidden", k.ffn_hidden},
                            {"heads", k.heads},
                            {"attention_s", k.attention_s},
                            {"attention_half_s", k.attention_half_s},
                            {"elementwise_s", k.elementwise_s},
                            {"optimizer_s", k.optimizer_s},
                            {"ranks", k.ranks},
                            {"threads", k.threads}});
  return j.dump(2) + "\n";
}

}  // namespace mt::plan

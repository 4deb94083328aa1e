#include "train/compare.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/error.h"

namespace mt {

namespace {

std::map<int64_t, double> read_losses(const std::string& path) {
  std::ifstream f(path);
  MT_REQUIRE(f.good(), IoError, "cannot open metrics file '", path, "'");
  std::map<int64_t, double> losses;
  std::string line;
  for (int64_t n = 1; std::getline(f, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      MT_THROW(DataError, path, ":", n, ": not a JSON object: ", e.what());
    }
    if (!j.contains("loss") || !j.contains("step")) continue;  // validation lines
    if (j.value("skipped", false)) continue;
    losses[j["step"].get<int64_t>()] = j["loss"].get<double>();
  }
  MT_REQUIRE(!losses.empty(), DataError, path, " holds no per-step losses");
  return losses;
}

}  // namespace

CompareResult compare_runs(const CompareOptions& o) {
  CompareResult r;
  std::ostringstream out;
  out.precision(6);
  const auto a = read_losses(o.metrics_a), b = read_losses(o.metrics_b);
  MT_REQUIRE(a.size() == b.size(), DataError, o.metrics_a, " has ", a.size(), " steps but ", o.metrics_b,
             " has ", b.size());
  double worst = -1;
  int64_t worst_step = -1;
  for (const auto& [step, la] : a) {
    const auto it = b.find(step);
    MT_REQUIRE(it != b.end(), DataError, "step ", step, " is in ", o.metrics_a, " but not in ", o.metrics_b);
    const double rel = std::abs(la - it->second) / std::max(std::abs(it->second), 1e-30);
    if (!(rel <= worst)) {  // NaN counts as worst
      worst = rel;
      worst_step = step;
    }
  }
  const bool losses_ok = worst <= o.rtol;
  out << "losses: " << a.size() << " steps, worst relative difference " << std::scientific << worst
      << " at step " << worst_step << " (" << a.at(worst_step) << " vs " << b.at(worst_step) << ")"
      << (losses_ok ? "" : "  EXCEEDS rtol") << "\n";
  r.ok = losses_ok;

  if (!o.model_a.empty() || !o.model_b.empty()) {
    MT_REQUIRE(!o.model_a.empty() && !o.model_b.empty(), ConfigError, "compare needs two model directories");
    namespace fs = std::filesystem;
    const auto fa = SafetensorsFile::open((fs::path(o.model_a) / "model.safetensors").string());
    const auto fb = SafetensorsFile::open((fs::path(o.model_b) / "model.safetensors").string());
    MT_REQUIRE(fa.names().size() == fb.names().size(), DataError, fa.path(), " has ", fa.names().size(),
               " tensors but ", fb.path(), " has ", fb.names().size());
    double worst_t = -1;
    std::string worst_name;
    for (const auto& name : fa.names()) {
      MT_REQUIRE(fb.has(name), DataError, "tensor '", name, "' is in ", fa.path(), " but not in ", fb.path());
      MT_REQUIRE(fa.shape(name) == fb.shape(name), DataError, "tensor '", name, "' has different shapes");
      std::vector<float> va(static_cast<size_t>(fa.numel(name))), vb(va.size());
      fa.read_f32(name, va.data(), fa.numel(name));
      fb.read_f32(name, vb.data(), fb.numel(name));
      double num = 0, den = 0;
      for (size_t i = 0; i < va.size(); ++i) {
        num += (static_cast<double>(va[i]) - vb[i]) * (static_cast<double>(va[i]) - vb[i]);
        den += static_cast<double>(vb[i]) * vb[i];
      }
      const double rel = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
      if (!(rel <= worst_t)) {
        worst_t = rel;
        worst_name = name;
      }
    }
    const bool tensors_ok = worst_t <= o.rtol;
    out << "tensors: " << fa.names().size() << ", worst relative L2 difference " << worst_t << " in "
        << worst_name << (tensors_ok ? "" : "  EXCEEDS rtol") << "\n";
    r.ok = r.ok && tensors_ok;
  }
  out << (r.ok ? "same within rtol " : "DIFFERENT beyond rtol ") << o.rtol << "\n";
  r.report = out.str();
  return r;
}

}  // namespace mt

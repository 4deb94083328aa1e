#include "train/compare.h"

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/file.h"
#include "formats/safetensors.h"

namespace mt {

namespace {

// Per-step values of one metrics file: step → loss, and step → grad_norm for
// the steps that record one.
struct Series {
  std::map<int64_t, double> loss, grad_norm;
};

Series read_metrics(const std::string& path) {
  std::istringstream f(read_file(path, kMaxTextFile, "metrics file"));
  Series s;
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
    const auto step = j["step"].get<int64_t>();
    s.loss[step] = j["loss"].get<double>();
    if (j.contains("grad_norm") && j["grad_norm"].is_number())
      s.grad_norm[step] = j["grad_norm"].get<double>();
  }
  MT_REQUIRE(!s.loss.empty(), DataError, path, " holds no per-step losses");
  return s;
}

// One line "<what>: N steps, worst relative difference … at step S (a vs b)";
// false when the worst |a − b| / |b| exceeds rtol (NaN counts as worst).
bool compare_steps(const char* what, const std::map<int64_t, double>& a, const std::map<int64_t, double>& b,
                   double rtol, const CompareOptions& o, std::ostream& out) {
  MT_REQUIRE(a.size() == b.size(), DataError, o.metrics_a, " has ", a.size(), " steps with ", what, " but ",
             o.metrics_b, " has ", b.size());
  double worst = -1;
  int64_t worst_step = -1;
  for (const auto& [step, va] : a) {
    const auto it = b.find(step);
    MT_REQUIRE(it != b.end(), DataError, "step ", step, " (", what, ") is in ", o.metrics_a, " but not in ",
               o.metrics_b);
    const double rel = std::abs(va - it->second) / std::max(std::abs(it->second), 1e-30);
    if (!(rel <= worst)) {
      worst = rel;
      worst_step = step;
    }
  }
  const bool ok = worst <= rtol;
  out << what << ": " << a.size() << " steps, worst relative difference " << std::scientific << worst
      << " at step " << worst_step << " (" << a.at(worst_step) << " vs " << b.at(worst_step) << ")";
  if (rtol != o.rtol) out << " [rtol " << rtol << "]";
  out << (ok ? "" : "  EXCEEDS rtol") << "\n";
  return ok;
}

// One line "tensors: N, worst relative L2 difference … in NAME"; false beyond rtol.
bool compare_models(const CompareOptions& o, std::ostream& out) {
  MT_REQUIRE(!o.model_a.empty() && !o.model_b.empty(), ConfigError, "compare needs two model directories");
  namespace fs = std::filesystem;
  const auto fa = SafetensorsFile::open((fs::path(o.model_a) / "model.safetensors").string());
  const auto fb = SafetensorsFile::open((fs::path(o.model_b) / "model.safetensors").string());
  MT_REQUIRE(fa.names().size() == fb.names().size(), DataError, fa.path(), " has ", fa.names().size(),
             " tensors but ", fb.path(), " has ", fb.names().size());
  double worst = -1;
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
    if (!(rel <= worst)) {
      worst = rel;
      worst_name = name;
    }
  }
  const double rtol = o.tensor_rtol < 0 ? o.rtol : o.tensor_rtol;
  const bool ok = worst <= rtol;
  out << "tensors: " << fa.names().size() << ", worst relative L2 difference " << std::scientific << worst
      << " in " << worst_name;
  if (rtol != o.rtol) out << " [rtol " << rtol << "]";
  out << (ok ? "" : "  EXCEEDS rtol") << "\n";
  return ok;
}

}  // namespace

CompareResult compare_runs(const CompareOptions& o) {
  CompareResult r;
  std::ostringstream out;
  out.precision(6);
  const Series a = read_metrics(o.metrics_a), b = read_metrics(o.metrics_b);
  r.ok = compare_steps("losses", a.loss, b.loss, o.rtol, o, out);
  if (a.grad_norm.empty() && b.grad_norm.empty()) {
    out << "grad_norm: in neither file, not compared\n";
  } else {
    const double grad_rtol = o.grad_norm_rtol < 0 ? o.rtol : o.grad_norm_rtol;
    r.ok = compare_steps("grad_norm", a.grad_norm, b.grad_norm, grad_rtol, o, out) && r.ok;
  }
  if (!o.model_a.empty() || !o.model_b.empty()) r.ok = compare_models(o, out) && r.ok;
  out << (r.ok ? "same within rtol " : "DIFFERENT beyond rtol ") << o.rtol << "\n";
  r.report = out.str();
  return r;
}

}  // namespace mt

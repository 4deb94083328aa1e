#include <filesystem>
#include <sstream>
#include <string>

#include "cli/report.h"
#include "core/error.h"
#include "core/file.h"

namespace mt::report {

const nlohmann::json& field(const nlohmann::json& j, const char* key) {
  static const nlohmann::json empty = nlohmann::json::object();
  return j.is_object() && j.contains(key) ? j[key] : empty;
}

Run read_run(const std::string& path) {
  std::istringstream in(read_file(path, kMaxTextFile, "metrics file"));
  Run run;
  run.name = std::filesystem::path(path).stem().string();
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    MT_REQUIRE(!j.is_discarded() && j.is_object(), DataError, path, ":", n,
               ": not a JSON object; a metrics file (train --metrics) holds one per line");
    if (j.contains("header"))
      run.header = j["header"];
    else if (j.contains("rank") && j.contains("time_s"))
      run.ranks.push_back(std::move(j));
    else if (j.contains("loss") && j.contains("step_time_s"))
      run.steps.push_back(std::move(j));
    else if (j.contains("val_loss"))
      run.vals.push_back(std::move(j));
  }
  MT_REQUIRE(
      !run.steps.empty(), DataError, path,
      " holds no training step (a line with \"loss\" and \"step_time_s\"): it is not a metrics file of "
      "meshtrain train --metrics");
  return run;
}

Plan read_plan(const std::string& path) {
  std::istringstream in(read_file(path, kMaxConfigFile, "plan file"));
  Plan plan{std::filesystem::path(path).stem().string(), nlohmann::json::parse(in, nullptr, false)};
  MT_REQUIRE(
      plan.j.is_object() && plan.j.contains("scaling") && plan.j["scaling"].is_array(), DataError, path,
      " is not a plan with a scaling table: write one with meshtrain plan --scaling N,M,… --json FILE");
  return plan;
}

}  // namespace mt::report

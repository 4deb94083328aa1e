// `meshtrain report`: one self-contained HTML page of charts from metrics
// files (docs/FORMATS.md "Metrics file"), drawn by Vega inlined into the page.
// report_data.cpp reads the files, report_charts.cpp turns them into Vega
// specs, report_vega.cpp assembles Vega, report_command.cpp writes the page.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace mt::report {

// One metrics file, its lines sorted by kind.
struct Run {
  std::string name;       // the file's name without .jsonl (made unique)
  nlohmann::json header;  // the header line's object; null in files written before it
  std::vector<nlohmann::json> steps, vals, ranks;
};

// One `meshtrain plan --scaling … --json FILE` output (docs/FORMATS.md "Plan output").
struct Plan {
  std::string name;  // the file's name without .json
  nlohmann::json j;
};

// Reads a plan output: IoError when it cannot be read, DataError when it is
// not a JSON object with a "scaling" array.
Plan read_plan(const std::string& path);

// Reads and checks one metrics file: IoError when it cannot be read,
// DataError naming the file and line when a line is not a JSON object, or
// when it holds no step line (then it is not a metrics file of `meshtrain train`).
Run read_run(const std::string& path);

// j[key] when j is an object holding it, else an empty object.
const nlohmann::json& field(const nlohmann::json& j, const char* key);

struct Chart {
  std::string title, note;  // note: what the chart shows and how to read it
  nlohmann::json spec;      // a Vega spec, data inlined
};

// Every chart the runs have data for: losses, step time split per rank, step
// time per step, communication time and bytes per axis, memory per rank against the analytic model,
// the pipeline bubble against theory (pp > 1), expert load (MoE), and the
// planner's strong and weak scaling when plans are given.
std::vector<Chart> make_charts(const std::vector<Run>& runs, const std::vector<Plan>& plans);

// Communication time per axis per step (the most any rank waited for the
// axis), with the axes that slowed in the second half of a run in its note.
Chart comm_time_chart(const std::vector<Run>& runs);
// The axes that slowed: at least 2 steps after a run's first quarter whose
// wait exceeds kSlowRatio × and kSlowFloorMs more than the median of that
// quarter (its first step left out; runs of fewer than 8 steps are not
// judged). "" when none did.
inline constexpr double kSlowRatio = 3.0;
inline constexpr double kSlowFloorMs = 5.0;
std::string slow_axes(const std::vector<Run>& runs);

// The JavaScript that defines `vega` in the page: `path` is a folder of
// Debian's libjs-vega modules (report_vega.cpp) or a one-file bundle. IoError
// naming what is missing.
std::string vega_script(const std::string& path);

// Vega specs of the two chart shapes. rows: {"x", "y", "s"} (a line per s),
// {"c", "p", "v"} (a bar per c, stacked by p).
nlohmann::json line_spec(const nlohmann::json& rows, const std::string& x_title, const std::string& y_title);
nlohmann::json stacked_spec(const nlohmann::json& rows, const std::string& y_title);

}  // namespace mt::report

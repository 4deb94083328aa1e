// --trace FILE and --trace-steps: the recorder (core/trace_spans.h) runs during
// the chosen steps, and at the end every rank's spans are merged into one
// Chrome-trace JSON file (Perfetto; the events: docs/FORMATS.md, "Trace").
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "train/run_mesh.h"
#include "train/trainer.h"

namespace mt {

// "3", "2-4", "2,5", "1,3-5" (steps counted from 0); empty: the last step.
// Throws ConfigError naming the value and the rule when it does not parse or
// names a step outside [0, steps).
std::set<int64_t> parse_trace_steps(const std::string& text, int64_t steps);

class TraceSession {
 public:
  // Off (every call a no-op) without --trace.
  TraceSession(const RunOptions& opts, int64_t steps);
  bool on() const { return !path_.empty(); }
  // Starts recording when `step` is one of the chosen steps.
  void begin_step(int64_t step);
  // Stops recording and keeps the step's window (its start and measured time).
  void end_step(const StepStats& s);
  // Collective over the world: rank 0 writes the merged file.
  void write(const RunMesh& mesh, double io_timeout_s, bool quiet);

 private:
  std::string path_;
  std::set<int64_t> steps_;
  bool recording_ = false;
  std::vector<StepStats> windows_;
};

}  // namespace mt

// Small pieces of the training loop's plumbing: the per-step metrics file and
// the fault injection of the failure tests.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace mt {

// One JSON object per line; nothing when the path is empty. IoError naming the
// path when it cannot be opened.
class MetricsWriter {
 public:
  explicit MetricsWriter(const std::string& path);
  void write(const nlohmann::json& j);

 private:
  std::ofstream out_;
};

// Fault injection for the failure tests: MESHTRAIN_FAULT="throw:RANK:STEP"
// makes that rank throw at the start of that step, "stall:RANK:STEP" makes it
// sleep for an hour there (the watchdog of the other ranks must end the job).
struct Fault {
  std::string kind;
  int rank = -1;
  int64_t step = -1;
};

// The fault MESHTRAIN_FAULT asks for (none when unset); ConfigError when malformed.
Fault read_fault();
// Throws or stalls when (rank, step) is the fault's.
void inject_fault(const Fault& f, int rank, int64_t step);

}  // namespace mt

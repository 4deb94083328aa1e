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

// Fault injection for the failure tests, MESHTRAIN_FAULT=KIND:RANK:STEP[:ARG]
// (the grammar and the kinds: docs/PARALLELISM.md, "Failures"). At the start of
// step STEP, world rank RANK
//   throw     throws one of meshtrain's errors;
//   bad_alloc throws std::bad_alloc (an error that is not one of ours);
//   stall     sleeps for an hour (the watchdog of the other ranks must end the job);
//   enospc    from then on, file writes fail with ENOSPC after ARG more bytes;
//   slow_io   from then on, each file commit first sleeps ARG seconds.
struct Fault {
  std::string kind;  // empty: no fault
  int rank = -1;
  int64_t step = -1;
  double arg = 0;  // enospc: bytes; slow_io: seconds
};

// Parses one MESHTRAIN_FAULT value; ConfigError naming the value and the
// accepted grammar for an unknown kind, a missing or extra field, or junk.
Fault parse_fault(const std::string& text);
// The fault MESHTRAIN_FAULT asks for (none when unset); ConfigError when malformed.
Fault read_fault();
// Fires the fault when (rank, step) is its.
void inject_fault(const Fault& f, int rank, int64_t step);

}  // namespace mt

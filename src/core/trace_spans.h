// The span recorder behind --trace: while active (the steps --trace-steps
// chose), each instrumented region of this process (one process is one rank)
// is kept as a span on the steady clock, with a sample of the allocator's
// bytes by kind at its end. Inactive, a scope costs one relaxed atomic load.
// train/trace.h turns what was recorded into the Chrome-trace file
// (docs/FORMATS.md, "Trace").
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory.h"

namespace mt {

// Seconds on the steady clock (the one Timer and the comm ledger read).
double trace_now();

struct TraceSpan {
  std::string name;
  std::string
      cat;  // "phase", "compute", "layer", "pipeline", "idle", "wait", "comm", "optimizer", "checkpoint"
  double start_s = 0, end_s = 0;  // trace_now() seconds
  bool main_thread = true;        // false: recorded by another thread (an async checkpoint writer)
  std::string args;               // the body of a JSON object ("\"axis\":\"dp\",…"), or empty
};

struct MemorySample {
  double t_s = 0;
  std::array<int64_t, kNumMemKinds> bytes{};  // current bytes by MemKind
};

class SpanRecorder {
 public:
  static bool active() { return active_.load(std::memory_order_relaxed); }
  // Starts (or stops) recording; the calling thread becomes the main thread.
  static void set_active(bool on);
  static void add(TraceSpan span);
  static void sample_memory(double t_s);
  // What was recorded since the last take (thread-safe).
  static std::vector<TraceSpan> take_spans();
  static std::vector<MemorySample> take_memory();

 private:
  static std::atomic<bool> active_;
};

// Records [construction, destruction) as one span when the recorder is active.
// The name is built only then: `prefix` followed by `index` when index >= 0.
class TraceScope {
 public:
  TraceScope(const char* cat, const char* prefix, int64_t index = -1, std::string args = {});
  ~TraceScope();
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  bool on_;
  TraceSpan span_;
};

}  // namespace mt

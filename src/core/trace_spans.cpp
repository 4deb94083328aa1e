#include "core/trace_spans.h"

#include <chrono>
#include <mutex>
#include <thread>
#include <utility>

namespace mt {

std::atomic<bool> SpanRecorder::active_{false};

namespace {
std::mutex g_mutex;
std::vector<TraceSpan> g_spans;
std::vector<MemorySample> g_memory;
std::thread::id g_main;
}  // namespace

double trace_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void SpanRecorder::set_active(bool on) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_main = std::this_thread::get_id();
  active_.store(on, std::memory_order_relaxed);
}

void SpanRecorder::add(TraceSpan span) {
  std::lock_guard<std::mutex> lock(g_mutex);
  span.main_thread = std::this_thread::get_id() == g_main;
  g_spans.push_back(std::move(span));
}

void SpanRecorder::sample_memory(double t_s) {
  const MemStats m = MemoryTracker::stats();
  MemorySample s;
  s.t_s = t_s;
  for (int k = 0; k < kNumMemKinds; ++k)
    s.bytes[static_cast<size_t>(k)] = m.current[static_cast<size_t>(k)];
  std::lock_guard<std::mutex> lock(g_mutex);
  g_memory.push_back(s);
}

std::vector<TraceSpan> SpanRecorder::take_spans() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return std::exchange(g_spans, {});
}

std::vector<MemorySample> SpanRecorder::take_memory() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return std::exchange(g_memory, {});
}

TraceScope::TraceScope(const char* cat, const char* prefix, int64_t index, std::string args)
    : on_(SpanRecorder::active()) {
  if (!on_) return;
  span_.cat = cat;
  span_.name = index >= 0 ? prefix + std::to_string(index) : std::string(prefix);
  span_.args = std::move(args);
  span_.start_s = trace_now();
}

TraceScope::~TraceScope() {
  if (!on_) return;
  span_.end_s = trace_now();
  SpanRecorder::sample_memory(span_.end_s);
  SpanRecorder::add(std::move(span_));
}

}  // namespace mt

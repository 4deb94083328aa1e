#include "core/memory.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>
#include <new>
#include <string>

namespace mt {

namespace {
std::mutex g_mutex;
MemStats g_stats;
}  // namespace

std::string_view mem_kind_name(MemKind kind) {
  switch (kind) {
    case MemKind::param:
      return "param";
    case MemKind::grad:
      return "grad";
    case MemKind::optim:
      return "optim";
    case MemKind::activation:
      return "activation";
    case MemKind::scratch:
      return "scratch";
    case MemKind::comm:
      return "comm";
    case MemKind::kv_cache:
      return "kv_cache";
    case MemKind::ckpt_staging:
      return "ckpt_staging";
    case MemKind::count_:
      break;
  }
  return "?";
}

void MemoryTracker::on_alloc(MemKind kind, int64_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const int k = static_cast<int>(kind);
  g_stats.current[k] += bytes;
  g_stats.peak[k] = std::max(g_stats.peak[k], g_stats.current[k]);
  g_stats.total_current += bytes;
  g_stats.total_peak = std::max(g_stats.total_peak, g_stats.total_current);
}

void MemoryTracker::on_free(MemKind kind, int64_t bytes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_stats.current[static_cast<int>(kind)] -= bytes;
  g_stats.total_current -= bytes;
}

MemStats MemoryTracker::stats() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_stats;
}

void MemoryTracker::reset_peaks() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_stats.peak = g_stats.current;
  g_stats.total_peak = g_stats.total_current;
}

int64_t resident_bytes(bool peak) {
  std::ifstream in("/proc/self/status");
  const std::string key = peak ? "VmHWM:" : "VmRSS:";
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) == 0) return std::stoll(line.substr(key.size())) * 1024;  // kB
  }
  return -1;
}

void* tracked_alloc(int64_t bytes, MemKind kind) {
  if (bytes <= 0) return nullptr;
  const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
  void* ptr = std::aligned_alloc(64, rounded);
  if (ptr == nullptr) throw std::bad_alloc();
  std::memset(ptr, 0, rounded);
  MemoryTracker::on_alloc(kind, bytes);
  return ptr;
}

void tracked_free(void* ptr, int64_t bytes, MemKind kind) {
  if (ptr == nullptr) return;
  std::free(ptr);
  MemoryTracker::on_free(kind, bytes);
}

}  // namespace mt

#include "core/fault_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <iterator>

#include "core/error.h"

namespace mt {
namespace {

constexpr int kPoints = static_cast<int>(std::size(kKillPoints));

// The armed point's index in kKillPoints (−1: none) and the kill_bytes budget
// left (−1: none). Atomics: a checkpoint may be written by another thread than
// the one that armed the fault.
std::atomic<int> g_armed_point{-1};
std::atomic<int64_t> g_bytes_left{-1};
// skip_reduce's site (empty: none); set before the step runs, read by its compute thread.
std::string g_skipped_site;
std::atomic<bool> g_skip_armed{false};

int point_index(std::string_view name) {
  for (int i = 0; i < kPoints; ++i)
    if (name == kKillPoints[i]) return i;
  return -1;
}

// One message, unbuffered (stdio's buffers die with the process), then SIGKILL.
[[noreturn]] void die(const std::string& where) {
  const std::string line =
      "meshtrain: MESHTRAIN_FAULT: killing process " + std::to_string(::getpid()) + " " + where + "\n";
  [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
  ::kill(::getpid(), SIGKILL);
  for (;;)
    ::pause();  // not reached: SIGKILL ends every thread of the process
}

}  // namespace

bool is_kill_point(std::string_view name) {
  return point_index(name) >= 0;
}

std::string kill_point_list() {
  std::string out;
  for (int i = 0; i < kPoints; ++i)
    out += (i ? ", " : "") + std::string(kKillPoints[i]);
  return out;
}

void arm_kill_point(std::string_view point) {
  const int i = point_index(point);
  MT_CHECK(i >= 0, "unknown kill point '", point, "'");
  g_armed_point.store(i);
}

void arm_kill_after_bytes(int64_t bytes) {
  MT_CHECK(bytes >= 0, "negative kill_bytes budget ", bytes);
  g_bytes_left.store(bytes);
}

void kill_point(const char* point) {
  const int i = point_index(point);
  MT_CHECK(i >= 0, "unknown kill point '", point, "'");
  if (g_armed_point.load() == i) die(std::string("at kill point ") + point);
}

size_t bytes_before_kill(size_t bytes) {
  int64_t left = g_bytes_left.load();
  while (left >= 0) {
    const int64_t take = left < static_cast<int64_t>(bytes) ? left : static_cast<int64_t>(bytes);
    if (g_bytes_left.compare_exchange_weak(left, left - take)) return static_cast<size_t>(take);
  }
  return bytes;
}

void arm_skipped_reduction(std::string_view site) {
  g_skipped_site = std::string(site);
  g_skip_armed.store(true);
}

bool skipped_reduction(std::string_view site) {
  if (!g_skip_armed.load() || site != g_skipped_site) return false;
  g_skip_armed.store(false);
  return true;
}

void kill_if_bytes_spent() {
  if (g_bytes_left.load() == 0) die("after the armed number of bytes (kill_bytes)");
}

}  // namespace mt

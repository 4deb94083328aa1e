// Tracked allocation: every long-lived buffer is charged to a category, and the
// tracker keeps current and peak bytes per category and in total. The peaks are
// what the memory reports and the ZeRO/SP/CP memory benchmarks compare with the
// analytic expectation.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace mt {

enum class MemKind : int {
  param = 0,     // model parameters
  grad,          // parameter gradients
  optim,         // optimizer state (AdamW m and v)
  activation,    // activations saved for backward, and their gradients
  scratch,       // temporary workspace
  comm,          // communication buffers
  kv_cache,      // generation's key/value cache (infer/kv_cache.h)
  ckpt_staging,  // a checkpoint's host copy of the state it saves (ckpt/checkpoint.h)
  count_
};

inline constexpr int kNumMemKinds = static_cast<int>(MemKind::count_);

std::string_view mem_kind_name(MemKind kind);

struct MemStats {
  std::array<int64_t, kNumMemKinds> current{};
  std::array<int64_t, kNumMemKinds> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;
};

// Process-wide counters (one process is one rank). Thread-safe.
class MemoryTracker {
 public:
  static void on_alloc(MemKind kind, int64_t bytes);
  static void on_free(MemKind kind, int64_t bytes);
  static MemStats stats();
  // Peaks restart from the current values (e.g. to measure one step).
  static void reset_peaks();
};

// This process's resident memory from /proc/self/status: VmRSS (now) or, with
// `peak`, VmHWM (its high-water mark); -1 where it cannot be read. It counts
// what the tracker does not (code, MPI's buffers, the C++ heap), so it is the
// figure to hold against the machine's memory.
int64_t resident_bytes(bool peak);

// 64-byte aligned, tracked, zero-initialised buffer of `bytes` bytes.
void* tracked_alloc(int64_t bytes, MemKind kind);
void tracked_free(void* ptr, int64_t bytes, MemKind kind);

// A standard allocator charging kind K, for buffers that live in a
// std::vector (TrackedVector): what a vector holds is counted at its capacity.
template <class T, MemKind K>
struct TrackedAllocator {
  using value_type = T;
  template <class U>
  struct rebind {
    using other = TrackedAllocator<U, K>;
  };
  TrackedAllocator() = default;
  template <class U>
  TrackedAllocator(const TrackedAllocator<U, K>&) noexcept {}
  T* allocate(size_t n) { return static_cast<T*>(tracked_alloc(static_cast<int64_t>(n * sizeof(T)), K)); }
  void deallocate(T* p, size_t n) noexcept { tracked_free(p, static_cast<int64_t>(n * sizeof(T)), K); }
  template <class U>
  bool operator==(const TrackedAllocator<U, K>&) const noexcept {
    return true;
  }
};

template <class T, MemKind K>
using TrackedVector = std::vector<T, TrackedAllocator<T, K>>;

}  // namespace mt

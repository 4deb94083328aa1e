// Where a buffer's memory lives (the host, a CUDA device, or the fake device
// that tests the seam) and per-device byte counters; the run's device and the
// explicit points where data crosses between it and the host. The counters of core/memory.h stay the host's
// (every CPU report reads them); device memory is counted here, by category and device, so that a GPU run can
// report its own peaks beside them.
//
// This file knows no CUDA: the CUDA library (src/cuda/) plugs its cudaMalloc
// and cudaFree in through DeviceAllocator, and host-only builds use the same
// counters and tests.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/memory.h"

namespace mt {

enum class DeviceKind : int { host = 0, cuda = 1, fake = 2 };

struct DeviceId {
  DeviceKind kind = DeviceKind::host;
  int index = 0;  // CUDA ordinal; 0 for the host
  bool operator==(const DeviceId&) const = default;
};

inline constexpr DeviceId kHost{DeviceKind::host, 0};
// The fake device (core/fake_device.h): host memory behind pointers that fault
// if the host dereferences them.
inline constexpr DeviceId kFake{DeviceKind::fake, 0};
inline constexpr DeviceId cuda_device(int index) {
  return DeviceId{DeviceKind::cuda, index};
}

std::string device_name(DeviceId dev);  // "host", "cuda:0", "fake"

// The CUDA ordinals the counters keep apart (devices of one process; one rank
// drives one GPU, so a handful is plenty).
inline constexpr int kMaxCudaDevices = 16;

// Process-wide, thread-safe counters of device memory: current and peak bytes
// per category per device, and their totals per device.
class DeviceMemoryTracker {
 public:
  static void on_alloc(DeviceId dev, MemKind kind, int64_t bytes);
  static void on_free(DeviceId dev, MemKind kind, int64_t bytes);
  static MemStats stats(DeviceId dev);
  static void reset_peaks(DeviceId dev);
};

// A source of raw memory on one device, and the byte moves on it: the
// memory half of a backend (the kernels are ops/kernels.h's table).
// Implementations allocate, free and copy; tracked_device_alloc does the
// counting and the checks. The copies of an allocator that has none (a test's
// counting-only allocator) refuse by name.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual DeviceId device() const = 0;
  virtual void* raw_alloc(int64_t bytes) = 0;  // zero-initialised; throws on failure
  virtual void raw_free(void* ptr) = 0;
  // Whether `ptr` points into memory this allocator handed out.
  virtual bool holds(const void* ptr) const;
  // Byte copies: device to host, host to device, device to device; and zeroing.
  virtual void to_host(void* host_dst, const void* src, int64_t bytes);
  virtual void from_host(void* dst, const void* host_src, int64_t bytes);
  virtual void copy(void* dst, const void* src, int64_t bytes);
  virtual void zero(void* dst, int64_t bytes);
  // Whether its bytes are counted as the host's (core/memory.h): the fake
  // device's are host memory, so the memory reports and the memory model hold
  // under it unchanged.
  virtual bool counts_as_host() const { return device().kind == DeviceKind::host; }
};

// The host allocator (64-byte aligned, zero-initialised, as tracked_alloc).
DeviceAllocator& host_allocator();

// The run's device (train.device): set once at start-up, before the model's
// first tensor, and the allocator every Tensor takes its storage from unless
// told otherwise. The host's until set.
DeviceAllocator& run_allocator();
void set_run_allocator(DeviceAllocator& alloc);
// The device `ptr` belongs to: the run's device if its allocator holds it,
// else the host.
DeviceId device_of(const void* ptr);

// The explicit crossings between the run's device and the host (docs/
// ARCHITECTURE.md "The kernel seam" lists them with their sizes). Each takes
// a label naming the crossing ("tokens", "loss", ...); a copy whose two sides
// are on the host is a memcpy and is not counted.
void copy_to_host(void* host_dst, const void* src, int64_t bytes, const char* label);
void copy_from_host(void* dst, const void* host_src, int64_t bytes, const char* label);
// Copies and zeroing on whatever device the pointers are; a copy between the
// device and the host is a crossing counted under "copy_bytes".
void copy_bytes(void* dst, const void* src, int64_t bytes);
void zero_bytes(void* dst, int64_t bytes);

struct CrossingCount {
  int64_t to_host = 0, to_host_bytes = 0;  // number and bytes, device to host
  int64_t from_host = 0, from_host_bytes = 0;
  bool operator==(const CrossingCount&) const = default;
};
// Counted crossings since the last reset, by label.
CrossingCount crossing_count(const std::string& label);
std::vector<std::pair<std::string, CrossingCount>> crossing_counts();
void reset_crossing_counts();

void* tracked_device_alloc(DeviceAllocator& alloc, int64_t bytes, MemKind kind);
void tracked_device_free(DeviceAllocator& alloc, void* ptr, int64_t bytes, MemKind kind);

// An owned, tracked buffer on one device: the storage a device tensor holds.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceAllocator& alloc, int64_t bytes, MemKind kind);
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  int64_t bytes() const { return bytes_; }
  MemKind kind() const { return kind_; }
  DeviceId device() const { return alloc_ ? alloc_->device() : kHost; }

 private:
  void release();
  DeviceAllocator* alloc_ = nullptr;
  void* ptr_ = nullptr;
  int64_t bytes_ = 0;
  MemKind kind_ = MemKind::scratch;
};

}  // namespace mt

// Where a buffer's memory lives (the host or a CUDA device) and per-device
// byte counters. The counters of core/memory.h stay the host's (every CPU
// report reads them); device memory is counted here, by category and device,
// so that a GPU run can report its own peaks beside them.
//
// This file knows no CUDA: the CUDA library (src/cuda/) plugs its cudaMalloc
// and cudaFree in through DeviceAllocator, and host-only builds use the same
// counters and tests.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "core/memory.h"

namespace mt {

enum class DeviceKind : int { host = 0, cuda = 1 };

struct DeviceId {
  DeviceKind kind = DeviceKind::host;
  int index = 0;  // CUDA ordinal; 0 for the host
  bool operator==(const DeviceId&) const = default;
};

inline constexpr DeviceId kHost{DeviceKind::host, 0};
inline constexpr DeviceId cuda_device(int index) {
  return DeviceId{DeviceKind::cuda, index};
}

std::string device_name(DeviceId dev);  // "host", "cuda:0"

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

// A source of raw memory on one device. Implementations only allocate and
// free; tracked_device_alloc does the counting and the checks.
class DeviceAllocator {
 public:
  virtual ~DeviceAllocator() = default;
  virtual DeviceId device() const = 0;
  virtual void* raw_alloc(int64_t bytes) = 0;  // throws on failure
  virtual void raw_free(void* ptr) = 0;
};

// The host allocator (64-byte aligned, zero-initialised, as tracked_alloc).
DeviceAllocator& host_allocator();

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

#include "core/device.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <utility>

#include "core/error.h"

namespace mt {
namespace {

// Slot 0 is the host, slot 1 + i is CUDA device i.
constexpr int kSlots = 1 + kMaxCudaDevices;

struct Counters {
  std::mutex mu;
  std::array<MemStats, kSlots> stats{};
};

Counters& counters() {
  static Counters c;
  return c;
}

int slot_of(DeviceId dev) {
  if (dev.kind == DeviceKind::host) {
    MT_CHECK(dev.index == 0, "the host has index 0, not ", dev.index);
    return 0;
  }
  MT_CHECK(dev.index >= 0 && dev.index < kMaxCudaDevices, "CUDA device index ", dev.index, " outside [0, ",
           kMaxCudaDevices, ")");
  return 1 + dev.index;
}

class HostAllocator final : public DeviceAllocator {
 public:
  DeviceId device() const override { return kHost; }
  void* raw_alloc(int64_t bytes) override {
    const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    return p;
  }
  void raw_free(void* ptr) override { std::free(ptr); }
};

}  // namespace

std::string device_name(DeviceId dev) {
  return dev.kind == DeviceKind::host ? std::string("host") : "cuda:" + std::to_string(dev.index);
}

void DeviceMemoryTracker::on_alloc(DeviceId dev, MemKind kind, int64_t bytes) {
  const int s = slot_of(dev);
  const auto k = static_cast<size_t>(kind);
  auto& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  MemStats& st = c.stats[static_cast<size_t>(s)];
  st.current[k] += bytes;
  st.peak[k] = std::max(st.peak[k], st.current[k]);
  st.total_current += bytes;
  st.total_peak = std::max(st.total_peak, st.total_current);
}

void DeviceMemoryTracker::on_free(DeviceId dev, MemKind kind, int64_t bytes) {
  const int s = slot_of(dev);
  const auto k = static_cast<size_t>(kind);
  auto& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  MemStats& st = c.stats[static_cast<size_t>(s)];
  MT_CHECK(st.current[k] >= bytes, "freeing ", bytes, " bytes of ", mem_kind_name(kind), " on ",
           device_name(dev), " but only ", st.current[k], " are allocated");
  st.current[k] -= bytes;
  st.total_current -= bytes;
}

MemStats DeviceMemoryTracker::stats(DeviceId dev) {
  const int s = slot_of(dev);
  auto& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats[static_cast<size_t>(s)];
}

void DeviceMemoryTracker::reset_peaks(DeviceId dev) {
  const int s = slot_of(dev);
  auto& c = counters();
  std::lock_guard<std::mutex> lock(c.mu);
  MemStats& st = c.stats[static_cast<size_t>(s)];
  st.peak = st.current;
  st.total_peak = st.total_current;
}

DeviceAllocator& host_allocator() {
  static HostAllocator alloc;
  return alloc;
}

void* tracked_device_alloc(DeviceAllocator& alloc, int64_t bytes, MemKind kind) {
  MT_CHECK(bytes >= 0, "negative allocation of ", bytes, " bytes");
  if (bytes == 0) return nullptr;
  void* p = alloc.raw_alloc(bytes);
  DeviceMemoryTracker::on_alloc(alloc.device(), kind, bytes);
  return p;
}

void tracked_device_free(DeviceAllocator& alloc, void* ptr, int64_t bytes, MemKind kind) {
  if (ptr == nullptr) return;
  alloc.raw_free(ptr);
  DeviceMemoryTracker::on_free(alloc.device(), kind, bytes);
}

DeviceBuffer::DeviceBuffer(DeviceAllocator& alloc, int64_t bytes, MemKind kind)
    : alloc_(&alloc), ptr_(tracked_device_alloc(alloc, bytes, kind)), bytes_(bytes), kind_(kind) {}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : alloc_(std::exchange(other.alloc_, nullptr)),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      kind_(other.kind_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    alloc_ = std::exchange(other.alloc_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    kind_ = other.kind_;
  }
  return *this;
}

void DeviceBuffer::release() {
  if (alloc_ != nullptr && ptr_ != nullptr) tracked_device_free(*alloc_, ptr_, bytes_, kind_);
  alloc_ = nullptr;
  ptr_ = nullptr;
  bytes_ = 0;
}

}  // namespace mt

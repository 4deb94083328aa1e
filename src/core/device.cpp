#include "core/device.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
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
  MT_CHECK(dev.kind != DeviceKind::fake, "the fake device's bytes are counted as the host's (core/memory.h)");
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
  bool holds(const void*) const override { return true; }
  void to_host(void* host_dst, const void* src, int64_t bytes) override { copy(host_dst, src, bytes); }
  void from_host(void* dst, const void* host_src, int64_t bytes) override { copy(dst, host_src, bytes); }
  void copy(void* dst, const void* src, int64_t bytes) override {
    if (bytes > 0) std::memmove(dst, src, static_cast<size_t>(bytes));
  }
  void zero(void* dst, int64_t bytes) override {
    if (bytes > 0) std::memset(dst, 0, static_cast<size_t>(bytes));
  }
};

[[noreturn]] void no_copies(const DeviceAllocator& a, const char* what) {
  throw Error(detail::concat("the allocator of ", device_name(a.device()), " has no ", what));
}

struct Crossings {
  std::mutex mu;
  std::map<std::string, CrossingCount> by_label;
};

Crossings& crossings() {
  static Crossings c;
  return c;
}

void count_crossing(const char* label, int64_t bytes, bool to_host) {
  auto& c = crossings();
  std::lock_guard<std::mutex> lock(c.mu);
  CrossingCount& n = c.by_label[label];
  (to_host ? n.to_host : n.from_host) += 1;
  (to_host ? n.to_host_bytes : n.from_host_bytes) += bytes;
}

DeviceAllocator* g_run_allocator = nullptr;

}  // namespace

std::string device_name(DeviceId dev) {
  switch (dev.kind) {
    case DeviceKind::host:
      return "host";
    case DeviceKind::fake:
      return "fake";
    case DeviceKind::cuda:
      break;
  }
  return "cuda:" + std::to_string(dev.index);
}

bool DeviceAllocator::holds(const void*) const {
  return false;
}
void DeviceAllocator::to_host(void*, const void*, int64_t) {
  no_copies(*this, "copy to the host");
}
void DeviceAllocator::from_host(void*, const void*, int64_t) {
  no_copies(*this, "copy from the host");
}
void DeviceAllocator::copy(void*, const void*, int64_t) {
  no_copies(*this, "copy");
}
void DeviceAllocator::zero(void*, int64_t) {
  no_copies(*this, "zeroing");
}

DeviceAllocator& run_allocator() {
  return g_run_allocator ? *g_run_allocator : host_allocator();
}

void set_run_allocator(DeviceAllocator& alloc) {
  g_run_allocator = &alloc;
}

DeviceId device_of(const void* ptr) {
  DeviceAllocator& run = run_allocator();
  return run.holds(ptr) ? run.device() : kHost;
}

namespace {
DeviceAllocator& allocator_of(const void* ptr) {
  DeviceAllocator& run = run_allocator();
  return run.holds(ptr) ? run : host_allocator();
}
}  // namespace

void copy_to_host(void* host_dst, const void* src, int64_t bytes, const char* label) {
  if (bytes <= 0) return;
  DeviceAllocator& a = allocator_of(src);
  a.to_host(host_dst, src, bytes);
  if (a.device() != kHost) count_crossing(label, bytes, true);
}

void copy_from_host(void* dst, const void* host_src, int64_t bytes, const char* label) {
  if (bytes <= 0) return;
  DeviceAllocator& a = allocator_of(dst);
  a.from_host(dst, host_src, bytes);
  if (a.device() != kHost) count_crossing(label, bytes, false);
}

void copy_bytes(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  DeviceAllocator& run = run_allocator();
  const bool from_device = run.holds(src), to_device = run.holds(dst);
  if (from_device == to_device) return allocator_of(dst).copy(dst, src, bytes);
  // One side on the host: a crossing, counted under its own label so that a
  // step's list shows any that the explicit ones do not account for.
  if (from_device) {
    copy_to_host(dst, src, bytes, "copy_bytes");
  } else {
    copy_from_host(dst, src, bytes, "copy_bytes");
  }
}

void zero_bytes(void* dst, int64_t bytes) {
  if (bytes > 0) allocator_of(dst).zero(dst, bytes);
}

CrossingCount crossing_count(const std::string& label) {
  auto& c = crossings();
  std::lock_guard<std::mutex> lock(c.mu);
  const auto it = c.by_label.find(label);
  return it == c.by_label.end() ? CrossingCount{} : it->second;
}

std::vector<std::pair<std::string, CrossingCount>> crossing_counts() {
  auto& c = crossings();
  std::lock_guard<std::mutex> lock(c.mu);
  return {c.by_label.begin(), c.by_label.end()};
}

void reset_crossing_counts() {
  auto& c = crossings();
  std::lock_guard<std::mutex> lock(c.mu);
  c.by_label.clear();
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
  if (alloc.counts_as_host()) {
    MemoryTracker::on_alloc(kind, bytes);
  } else {
    DeviceMemoryTracker::on_alloc(alloc.device(), kind, bytes);
  }
  return p;
}

void tracked_device_free(DeviceAllocator& alloc, void* ptr, int64_t bytes, MemKind kind) {
  if (ptr == nullptr) return;
  alloc.raw_free(ptr);
  if (alloc.counts_as_host()) {
    MemoryTracker::on_free(kind, bytes);
  } else {
    DeviceMemoryTracker::on_free(alloc.device(), kind, bytes);
  }
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

#include "core/fake_device.h"

#include <cstdlib>
#include <cstring>
#include <new>

namespace mt {
namespace {

class FakeAllocator final : public DeviceAllocator {
 public:
  DeviceId device() const override { return kFake; }
  void* raw_alloc(int64_t bytes) override {
    const size_t rounded = (static_cast<size_t>(bytes) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    return reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) | kFakeTag);
  }
  void raw_free(void* ptr) override { std::free(fake_untag(ptr)); }
  bool holds(const void* ptr) const override { return fake_tagged(ptr); }
  void to_host(void* host_dst, const void* src, int64_t bytes) override {
    std::memcpy(fake_untag(host_dst), fake_untag(src), static_cast<size_t>(bytes));
  }
  void from_host(void* dst, const void* host_src, int64_t bytes) override {
    std::memcpy(fake_untag(dst), fake_untag(host_src), static_cast<size_t>(bytes));
  }
  void copy(void* dst, const void* src, int64_t bytes) override {
    std::memmove(fake_untag(dst), fake_untag(src), static_cast<size_t>(bytes));
  }
  void zero(void* dst, int64_t bytes) override {
    std::memset(fake_untag(dst), 0, static_cast<size_t>(bytes));
  }
  bool counts_as_host() const override { return true; }
};

}  // namespace

DeviceAllocator& fake_allocator() {
  static FakeAllocator alloc;
  return alloc;
}

}  // namespace mt

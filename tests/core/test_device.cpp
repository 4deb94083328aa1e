// The device notion: per-device, per-category counters, and buffers that
// charge and release them. A fake allocator stands in for a GPU, so the
// bookkeeping is tested on any machine.
#include <gtest/gtest.h>

#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "core/fake_device.h"
#include "core/tensor.h"

namespace mt {
namespace {

class FakeGpuAllocator final : public DeviceAllocator {
 public:
  explicit FakeGpuAllocator(int index) : dev_(cuda_device(index)) {}
  DeviceId device() const override { return dev_; }
  void* raw_alloc(int64_t bytes) override {
    ++live;
    return new char[static_cast<size_t>(bytes)];
  }
  void raw_free(void* ptr) override {
    --live;
    delete[] static_cast<char*>(ptr);
  }
  int live = 0;

 private:
  DeviceId dev_;
};

TEST(Device, NamesAndEquality) {
  EXPECT_EQ(device_name(kHost), "host");
  EXPECT_EQ(device_name(cuda_device(3)), "cuda:3");
  EXPECT_FALSE(kHost == cuda_device(0));
}

TEST(Device, CountersArePerDeviceAndPerKind) {
  FakeGpuAllocator gpu5(5), gpu6(6);
  const MemStats h0 = DeviceMemoryTracker::stats(kHost);
  DeviceMemoryTracker::reset_peaks(cuda_device(5));
  {
    DeviceBuffer a(gpu5, 1000, MemKind::param);
    DeviceBuffer b(gpu5, 300, MemKind::activation);
    DeviceBuffer c(gpu6, 77, MemKind::param);
    const MemStats s5 = DeviceMemoryTracker::stats(cuda_device(5));
    EXPECT_EQ(s5.current[static_cast<int>(MemKind::param)], 1000);
    EXPECT_EQ(s5.current[static_cast<int>(MemKind::activation)], 300);
    EXPECT_EQ(s5.total_current, 1300);
    EXPECT_EQ(DeviceMemoryTracker::stats(cuda_device(6)).total_current, 77);
    EXPECT_EQ(a.device(), cuda_device(5));
    EXPECT_EQ(gpu5.live, 2);
    DeviceBuffer moved = std::move(b);  // ownership moves, counts do not change
    EXPECT_EQ(DeviceMemoryTracker::stats(cuda_device(5)).total_current, 1300);
    EXPECT_EQ(b.data(), nullptr);
  }
  const MemStats s5 = DeviceMemoryTracker::stats(cuda_device(5));
  EXPECT_EQ(s5.total_current, 0);
  EXPECT_EQ(s5.total_peak, 1300);
  EXPECT_EQ(s5.peak[static_cast<int>(MemKind::param)], 1000);
  EXPECT_EQ(gpu5.live, 0);
  EXPECT_EQ(gpu6.live, 0);
  // Nothing was charged to the host.
  EXPECT_EQ(DeviceMemoryTracker::stats(kHost).total_current, h0.total_current);
}

TEST(Device, HostBufferIsZeroedAndAligned) {
  DeviceBuffer buf(host_allocator(), 100, MemKind::scratch);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 64, 0u);
  const auto* p = static_cast<const unsigned char*>(buf.data());
  for (int i = 0; i < 100; ++i)
    EXPECT_EQ(p[i], 0);
  EXPECT_EQ(buf.device(), kHost);
}

TEST(Device, OverFreeAndBadIndexAreCaught) {
  EXPECT_THROW(DeviceMemoryTracker::on_free(cuda_device(7), MemKind::grad, 8), Error);
  EXPECT_THROW(DeviceMemoryTracker::stats(cuda_device(kMaxCudaDevices)), Error);
}

// The fake device: a host read through its pointer faults; copies across are
// counted by label; a Tensor made while it is the run's device lives there.
TEST(FakeDevice, HostDereferenceFaults) {
  DeviceBuffer buf(fake_allocator(), 64, MemKind::scratch);
  ASSERT_TRUE(fake_tagged(buf.data()));
  const volatile float* p = static_cast<const float*>(buf.data());
  EXPECT_DEATH({ [[maybe_unused]] float x = *p; }, "");
  const volatile float* host = fake_untag(static_cast<const float*>(buf.data()));
  EXPECT_EQ(*host, 0.0f);  // zero-initialised, readable once untagged
}

TEST(FakeDevice, CrossingsAreCountedAndCopiesRoundTrip) {
  set_run_allocator(fake_allocator());
  reset_crossing_counts();
  {
    Tensor t({4, 8}, MemKind::activation);
    EXPECT_EQ(t.device(), kFake);
    EXPECT_EQ(device_of(t.data()), kFake);
    std::vector<float> in(32), out(32, -1.0f);
    for (int i = 0; i < 32; ++i)
      in[static_cast<size_t>(i)] = static_cast<float>(i) * 0.5f;
    copy_from_host(t.data(), in.data(), 32 * sizeof(float), "test in");
    copy_to_host(out.data(), t.data(), 16 * sizeof(float), "test out");
    copy_to_host(out.data() + 16, t.data() + 16, 16 * sizeof(float), "test out");
    EXPECT_EQ(in, out);
    EXPECT_EQ(crossing_count("test in"), (CrossingCount{0, 0, 1, 128}));
    EXPECT_EQ(crossing_count("test out"), (CrossingCount{2, 128, 0, 0}));
    // A copy with one side on the host is a crossing of its own label.
    copy_bytes(out.data(), t.data(), 8);
    EXPECT_EQ(crossing_count("copy_bytes"), (CrossingCount{1, 8, 0, 0}));
    // Host to host is no crossing.
    copy_to_host(out.data(), in.data(), 8, "host");
    EXPECT_EQ(crossing_count("host"), CrossingCount{});
  }
  set_run_allocator(host_allocator());
  const float on_host = 1.0f;
  EXPECT_EQ(device_of(&on_host), kHost);
}

}  // namespace
}  // namespace mt

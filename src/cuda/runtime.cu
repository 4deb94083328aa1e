#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "cuda/check.h"
#include "cuda/runtime.h"

namespace mt::cuda {
namespace {

class CudaAllocator final : public DeviceAllocator {
 public:
  explicit CudaAllocator(int index) : index_(index) {}
  DeviceId device() const override { return cuda_device(index_); }
  void* raw_alloc(int64_t bytes) override {
    int current = 0;
    MT_CUDA_CHECK(cudaGetDevice(&current));
    MT_CHECK(current == index_, "allocating on cuda:", index_, " while cuda:", current, " is current");
    void* p = nullptr;
    MT_CUDA_CHECK(cudaMalloc(&p, static_cast<size_t>(bytes)));
    return p;
  }
  void raw_free(void* ptr) override {
    // Frees in destructors must not throw; a failure here means the context is
    // already broken, which the next checked call reports.
    (void)cudaFree(ptr);
  }

 private:
  int index_;
};

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no device" / "no driver" error
    return 0;
  }
  return n;
}

std::string device_description() {
  int dev = 0;
  MT_CUDA_CHECK(cudaGetDevice(&dev));
  cudaDeviceProp p{};
  MT_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  return detail::concat(p.name, ", ", p.multiProcessorCount, " SMs, ",
                        static_cast<double>(p.totalGlobalMem) / (1 << 30), " GiB, compute ", p.major, ".",
                        p.minor);
}

void synchronize() {
  MT_CUDA_CHECK(cudaDeviceSynchronize());
}

DeviceAllocator& allocator(int index) {
  MT_CHECK(index >= 0 && index < kMaxCudaDevices, "CUDA device index ", index);
  static std::array<std::unique_ptr<CudaAllocator>, kMaxCudaDevices> allocs;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  auto& a = allocs[static_cast<size_t>(index)];
  if (!a) a = std::make_unique<CudaAllocator>(index);
  return *a;
}

void copy_to_device(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) MT_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) MT_CUDA_CHECK(cudaMemcpy(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost));
}

}  // namespace mt::cuda

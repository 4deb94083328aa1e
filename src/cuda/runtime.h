// The CUDA device as the rest of meshtrain sees it: how many there are, an
// allocator for core/device.h's tracked buffers, copies, and a typed owning
// array for tests and benchmarks. Plain C++ types only: no CUDA header here.
//
// Every kernel of src/cuda/ runs on the default stream of the current device;
// copies to and from the host wait for it, so results read back are complete.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/error.h"

namespace mt::cuda {

// Number of usable CUDA devices; 0 when there is none or no driver (never throws).
int device_count();
// "NVIDIA H200, 132 SMs, 139.8 GiB, compute 9.0" of the current device.
std::string device_description();
void synchronize();  // waits for the device; reports a kernel's asynchronous error

// cudaMalloc / cudaFree on device `index`, for DeviceBuffer.
DeviceAllocator& allocator(int index = 0);

void copy_to_device(void* dst, const void* src, int64_t bytes);
void copy_to_host(void* dst, const void* src, int64_t bytes);

// n elements of T on CUDA device 0, tracked under `kind`. Not initialised.
template <typename T>
class Array {
 public:
  Array() = default;
  explicit Array(int64_t n, MemKind kind = MemKind::scratch)
      : n_(n), buf_(allocator(0), n * static_cast<int64_t>(sizeof(T)), kind) {}
  explicit Array(const std::vector<T>& host, MemKind kind = MemKind::scratch)
      : Array(static_cast<int64_t>(host.size()), kind) {
    upload(host);
  }
  T* data() const { return static_cast<T*>(buf_.data()); }
  int64_t size() const { return n_; }
  void upload(const std::vector<T>& host) {
    MT_CHECK(static_cast<int64_t>(host.size()) == n_, "upload of ", host.size(), " into ", n_);
    copy_to_device(data(), host.data(), bytes());
  }
  std::vector<T> download() const {
    std::vector<T> host(static_cast<size_t>(n_));
    copy_to_host(host.data(), data(), bytes());
    return host;
  }
  int64_t bytes() const { return n_ * static_cast<int64_t>(sizeof(T)); }

 private:
  int64_t n_ = 0;
  DeviceBuffer buf_;
};

}  // namespace mt::cuda

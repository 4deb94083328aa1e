// Tensor: a contiguous, row-major buffer with a shape, owned and tracked.
// Only fp32 today; its storage comes from an allocator that knows the device
// (core/device.h): the run's device unless told otherwise. Kernels take raw
// pointers and sizes (ops/kernels.h); a Tensor is the owner of the storage,
// and its data() is a device pointer that only kernels and the explicit
// crossings (copy_to_host, copy_from_host) may read.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/memory.h"

namespace mt {

enum class DType { f32 };

class Tensor {
 public:
  Tensor() = default;
  // Zero-initialised tensor of `shape`, charged to `kind`, on the run's device
  // (run_allocator()) or on `alloc`'s.
  Tensor(std::vector<int64_t> shape, MemKind kind);
  Tensor(std::vector<int64_t> shape, MemKind kind, DeviceAllocator& alloc);
  ~Tensor();
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  int64_t numel() const { return numel_; }
  int64_t nbytes() const { return numel_ * static_cast<int64_t>(sizeof(float)); }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(static_cast<size_t>(i)); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  bool empty() const { return numel_ == 0; }
  DType dtype() const { return DType::f32; }
  DeviceId device() const;
  MemKind kind() const { return kind_; }

  void zero();
  std::string shape_str() const;  // "[2, 4]"

 private:
  void release();

  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  MemKind kind_ = MemKind::scratch;
  DeviceAllocator* alloc_ = nullptr;
  float* data_ = nullptr;
};

int64_t numel_of(const std::vector<int64_t>& shape);

}  // namespace mt

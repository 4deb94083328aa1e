// Tensor: a contiguous, row-major buffer with a shape, owned and tracked.
// Only fp32 on the CPU today; dtype and device are fields so that bf16 and a
// CUDA device can be added without changing the callers' grammar. Kernels take
// raw pointers and sizes (see ops/); a Tensor is the owner of the storage.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/memory.h"

namespace mt {

enum class DType { f32 };
enum class Device { cpu };

class Tensor {
 public:
  Tensor() = default;
  // Zero-initialised tensor of `shape`, charged to `kind`.
  Tensor(std::vector<int64_t> shape, MemKind kind);
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
  Device device() const { return Device::cpu; }
  MemKind kind() const { return kind_; }

  void zero();
  std::string shape_str() const;  // "[2, 4]"

 private:
  void release();

  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  MemKind kind_ = MemKind::scratch;
  float* data_ = nullptr;
};

int64_t numel_of(const std::vector<int64_t>& shape);

}  // namespace mt

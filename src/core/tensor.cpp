#include "core/tensor.h"

#include <utility>

#include "core/error.h"

namespace mt {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    MT_CHECK(d >= 0, "negative dimension");
    n *= d;
  }
  return n;
}

Tensor::Tensor(std::vector<int64_t> shape, MemKind kind) : Tensor(std::move(shape), kind, run_allocator()) {}

Tensor::Tensor(std::vector<int64_t> shape, MemKind kind, DeviceAllocator& alloc)
    : shape_(std::move(shape)), numel_(numel_of(shape_)), kind_(kind), alloc_(&alloc) {
  data_ = static_cast<float*>(tracked_device_alloc(alloc, nbytes(), kind_));
}

DeviceId Tensor::device() const {
  return alloc_ ? alloc_->device() : run_allocator().device();
}

Tensor::~Tensor() {
  release();
}

Tensor::Tensor(Tensor&& other) noexcept
    : shape_(std::move(other.shape_)),
      numel_(other.numel_),
      kind_(other.kind_),
      alloc_(other.alloc_),
      data_(other.data_) {
  other.numel_ = 0;
  other.data_ = nullptr;
  other.shape_.clear();
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    release();
    shape_ = std::move(other.shape_);
    numel_ = other.numel_;
    kind_ = other.kind_;
    alloc_ = other.alloc_;
    data_ = other.data_;
    other.numel_ = 0;
    other.data_ = nullptr;
    other.shape_.clear();
  }
  return *this;
}

void Tensor::release() {
  if (alloc_ != nullptr) tracked_device_free(*alloc_, data_, nbytes(), kind_);
  data_ = nullptr;
  numel_ = 0;
}

void Tensor::zero() {
  if (data_ != nullptr) alloc_->zero(data_, nbytes());
}

std::string Tensor::shape_str() const {
  std::string s = "[";
  for (size_t i = 0; i < shape_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape_[i]);
  }
  return s + "]";
}

}  // namespace mt

// A temporary device buffer from the stream-ordered allocator (internal).
#pragma once

#include <cstdint>

#include "cuda/check.h"

namespace mt::cuda::detail {

template <typename T>
class Scratch {
 public:
  explicit Scratch(int64_t n) {
    if (n > 0)
      MT_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&p_), sizeof(T) * static_cast<size_t>(n), 0));
  }
  ~Scratch() {
    if (p_ != nullptr) (void)cudaFreeAsync(p_, 0);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() const { return p_; }

 private:
  T* p_ = nullptr;
};

}  // namespace mt::cuda::detail

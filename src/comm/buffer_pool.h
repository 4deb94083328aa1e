// Host buffers of the transport, reused across calls (comm/ only). Open MPI
// 4.1 moved a 64 MiB all-reduce between two local ranks at 0.15–0.25 GB/s when
// it ran in place or into a freshly allocated buffer, and at 0.8–4 GB/s into a
// buffer it had seen before; so the out-of-place all-reduce (mpi_backend.cpp)
// and the rank-ordered sum's exchanges (ranked_sum.cpp) receive into pooled
// buffers, and the host copies of device buffers (staged_backend.h) are pooled
// the same way. A pool only grows to the largest set of operations in flight.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/memory.h"

namespace mt {

// Buffer: a std::vector of char (any allocator).
template <class Buffer>
class BasicBufferPool {
 public:
  // A buffer of at least `bytes` (possibly larger): the first free one that is
  // large enough, else a new one.
  std::unique_ptr<Buffer> take(size_t bytes) {
    for (size_t i = 0; i < free_.size(); ++i) {
      if (free_[i]->size() >= bytes) {
        auto b = std::move(free_[i]);
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
        return b;
      }
    }
    return std::make_unique<Buffer>(bytes);
  }
  void give(std::unique_ptr<Buffer> b) { free_.push_back(std::move(b)); }

 private:
  std::vector<std::unique_ptr<Buffer>> free_;
};

using BufferPool = BasicBufferPool<std::vector<char>>;

// The process's pool: ranks call MPI from one thread (MPI_THREAD_FUNNELED).
BufferPool& comm_buffer_pool();

// Host copies of device buffers, counted as communication memory (MemKind::comm).
using StagingBuffer = TrackedVector<char, MemKind::comm>;
BasicBufferPool<StagingBuffer>& staging_buffer_pool();

}  // namespace mt

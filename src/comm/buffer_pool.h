// Receive buffers of the transport, reused across calls (comm/ only). Open MPI
// 4.1 moved a 64 MiB all-reduce between two local ranks at 0.15–0.25 GB/s when
// it ran in place or into a freshly allocated buffer, and at 0.8–4 GB/s into a
// buffer it had seen before; so the out-of-place all-reduce (mpi_backend.cpp)
// and the rank-ordered sum's exchanges (ranked_sum.cpp) receive into pooled
// buffers. The pool only grows to the largest set of operations in flight.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

namespace mt {

class BufferPool {
 public:
  // A buffer of at least `bytes` (possibly larger).
  std::unique_ptr<std::vector<char>> take(size_t bytes);
  void give(std::unique_ptr<std::vector<char>> b);

 private:
  std::vector<std::unique_ptr<std::vector<char>>> free_;
};

// The process's pool: ranks call MPI from one thread (MPI_THREAD_FUNNELED).
BufferPool& comm_buffer_pool();

}  // namespace mt

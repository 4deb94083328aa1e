#include "comm/buffer_pool.h"

namespace mt {

BufferPool& comm_buffer_pool() {
  static BufferPool pool;
  return pool;
}

BasicBufferPool<StagingBuffer>& staging_buffer_pool() {
  static BasicBufferPool<StagingBuffer> pool;
  return pool;
}

}  // namespace mt

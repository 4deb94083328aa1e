#include "comm/buffer_pool.h"

namespace mt {

std::unique_ptr<std::vector<char>> BufferPool::take(size_t bytes) {
  for (size_t i = 0; i < free_.size(); ++i) {
    if (free_[i]->size() >= bytes) {
      auto b = std::move(free_[i]);
      free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(i));
      return b;
    }
  }
  return std::make_unique<std::vector<char>>(bytes);
}

void BufferPool::give(std::unique_ptr<std::vector<char>> b) {
  free_.push_back(std::move(b));
}

BufferPool& comm_buffer_pool() {
  static BufferPool pool;
  return pool;
}

}  // namespace mt

#include "parallel/expert_canonical.h"

#include <algorithm>

#include "core/device.h"
#include "core/error.h"
#include "ops/primitives.h"

namespace mt::ep {

void ExpertLeaves::begin_step(int64_t atoms) {
  tree_.reset(atoms);
  if (root_ >= 0) free_.push_back(root_);
  root_ = -1;
}

float* ExpertLeaves::take() {
  if (free_.empty()) {
    bufs_.emplace_back(std::vector<int64_t>{numel_}, MemKind::grad);
    free_.push_back(static_cast<int>(bufs_.size()) - 1);
  }
  const int i = free_.back();
  free_.pop_back();
  float* p = bufs_[static_cast<size_t>(i)].data();
  zero_bytes(p, numel_ * int64_t{sizeof(float)});
  return p;
}

int ExpertLeaves::index_of(const float* p) const {
  for (size_t i = 0; i < bufs_.size(); ++i)
    if (bufs_[i].data() == p) return static_cast<int>(i);
  MT_CHECK(false, "ExpertLeaves: a leaf not taken from this pool");
  return -1;
}

void ExpertLeaves::insert(int64_t atom, float* leaf) {
  auto sum = [&](int& left, int& right) {
    add(bufs_[static_cast<size_t>(left)].data(), bufs_[static_cast<size_t>(right)].data(), numel_);
  };
  auto give_back = [&](int i) { free_.push_back(i); };
  tree_.insert(atom, index_of(leaf), sum, give_back);
}

const float* ExpertLeaves::root() {
  MT_CHECK(tree_.complete(), "ExpertLeaves: root of ", tree_.inserted(), " leaves");
  if (root_ < 0) {
    auto sum = [&](int& left, int& right) {
      add(bufs_[static_cast<size_t>(left)].data(), bufs_[static_cast<size_t>(right)].data(), numel_);
    };
    root_ = tree_.finish(sum, [&](int i) { free_.push_back(i); });
  }
  return bufs_[static_cast<size_t>(root_)].data();
}

int64_t ExpertLeaves::buffers_for(const std::vector<int64_t>& microbatches, int64_t ep) {
  const std::vector<int64_t> order = expert_leaf_order(microbatches, ep);
  CanonicalTree<int> tree(static_cast<int64_t>(order.size()));
  int64_t most = 0;
  for (size_t at = 0; at < order.size(); at += static_cast<size_t>(ep)) {
    // A microbatch's ep leaves are all taken before the first is inserted.
    most = std::max(most, static_cast<int64_t>(tree.nodes().size()) + ep);
    for (size_t i = at; i < at + static_cast<size_t>(ep); ++i)
      tree.insert(
          order[i], 0, [](int&, int&) {}, [](int) {});
  }
  return most;
}

std::vector<int64_t> expert_leaf_order(const std::vector<int64_t>& microbatches, int64_t ep) {
  const auto M = static_cast<int64_t>(microbatches.size());
  std::vector<int64_t> order;
  for (const int64_t m : microbatches)
    for (int64_t i = 0; i < ep; ++i)
      order.push_back(i * M + m);
  return order;
}

}  // namespace mt::ep

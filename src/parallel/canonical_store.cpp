#include "parallel/canonical_store.h"

#include <algorithm>
#include <utility>

#include "core/device.h"
#include "core/error.h"
#include "ops/primitives.h"

namespace mt {

CanonicalStore::CanonicalStore(std::unique_ptr<ParamStore> inner, std::vector<UnitSpec> units, Group* over)
    : inner_(std::move(inner)), units_(std::move(units)), trees_(units_.size()), over_(over) {
  MT_CHECK(inner_ != nullptr, "CanonicalStore needs the run's store");
}

int CanonicalStore::take_buffer(UnitTree& t, int unit) {
  if (t.free.empty()) {
    t.bufs.emplace_back(std::vector<int64_t>{units_[static_cast<size_t>(unit)].numel()}, MemKind::grad);
    t.free.push_back(static_cast<int>(t.bufs.size()) - 1);
  }
  const int i = t.free.back();
  t.free.pop_back();
  return i;
}

float* CanonicalStore::acquire_grads(int unit) {
  if (microbatches_ == 1) return inner_->acquire_grads(unit);
  UnitTree& t = trees_[static_cast<size_t>(unit)];
  if (t.open < 0) {
    MT_CHECK(t.open_microbatch != current_, "CanonicalStore: unit ", unit, " released twice in microbatch ",
             current_);
    t.open = take_buffer(t, unit);
    t.open_microbatch = current_;
    zero_bytes(buffer(t, t.open), t.bufs[static_cast<size_t>(t.open)].nbytes());
  }
  return buffer(t, t.open);
}

void CanonicalStore::release_grads(int unit) {
  if (microbatches_ == 1) {
    inner_->release_grads(unit);
    return;
  }
  UnitTree& t = trees_[static_cast<size_t>(unit)];
  MT_CHECK(t.open >= 0, "CanonicalStore: release of gradients not acquired (unit ", unit, ")");
  const int64_t n = units_[static_cast<size_t>(unit)].numel();
  auto sum = [&](int& left, int& right) { add(buffer(t, left), buffer(t, right), n); };  // left + right
  auto give_back = [&](int i) { t.free.push_back(i); };
  t.tree.insert(t.open_microbatch, t.open, sum, give_back);
  t.open = -1;
  if (!t.tree.complete()) return;
  const int root = t.tree.finish(sum, give_back);
  copy_bytes(inner_->acquire_grads(unit), buffer(t, root), n * int64_t{sizeof(float)});
  inner_->release_grads(unit);
  t.free.push_back(root);
}

float* CanonicalStore::acquire_tied_grads(int unit) {
  MT_CHECK(tied_unit_ < 0 || tied_unit_ == unit, "CanonicalStore: a second tied unit (", unit, ", then ",
           tied_unit_, ")");
  MT_CHECK(tied_.open < 0, "CanonicalStore: the tied head's gradient acquired twice");
  tied_unit_ = unit;
  tied_.open = take_buffer(tied_, unit);
  tied_.open_microbatch = current_;
  zero_bytes(buffer(tied_, tied_.open), tied_.bufs[static_cast<size_t>(tied_.open)].nbytes());
  return buffer(tied_, tied_.open);
}

void CanonicalStore::release_tied_grads(int unit) {
  MT_CHECK(tied_.open >= 0 && unit == tied_unit_, "CanonicalStore: release of a tied gradient not acquired");
  const int64_t n = units_[static_cast<size_t>(unit)].numel();
  auto sum = [&](int& left, int& right) { add(buffer(tied_, left), buffer(tied_, right), n); };
  auto give_back = [&](int i) { tied_.free.push_back(i); };
  tied_.tree.insert(tied_.open_microbatch, tied_.open, sum, give_back);
  tied_.open = -1;
  if (tied_.tree.complete()) tied_root_ = tied_.tree.finish(sum, give_back);
}

void CanonicalStore::add_tied_root() {
  if (tied_unit_ < 0) return;
  MT_CHECK(tied_root_ >= 0, "CanonicalStore: the tied head has ", tied_.tree.inserted(), " of ",
           microbatches_, " microbatch gradients at the end of the step");
  float* h = buffer(tied_, tied_root_);
  const int64_t n = units_[static_cast<size_t>(tied_unit_)].numel();
  if (over_ != nullptr && over_->size() > 1)  // each element the tree over ranks, as the inner store's
    over_->all_reduce(h, n, ElemType::f32, SumOrder::tree, "tied head grads");
  inner_->add_reduced_grads(tied_unit_, h);
  tied_.free.push_back(tied_root_);
  tied_root_ = -1;
}

void CanonicalStore::begin_step(int64_t microbatches) {
  microbatches_ = microbatches;
  current_ = 0;
  tied_.tree.reset(microbatches);
  tied_.open = -1;
  tied_.open_microbatch = -1;
  for (UnitTree& t : trees_) {
    t.tree.reset(microbatches);
    t.open = -1;
    t.open_microbatch = -1;
  }
  inner_->begin_step(microbatches);
}

void CanonicalStore::begin_microbatch(int64_t index, int64_t microbatch) {
  current_ = microbatch;
  inner_->begin_microbatch(index, microbatch);
}

void CanonicalStore::finish_grads() {
  if (microbatches_ > 1) {
    for (size_t u = 0; u < trees_.size(); ++u)
      MT_CHECK(trees_[u].tree.complete(), "CanonicalStore: unit ", u, " has ", trees_[u].tree.inserted(),
               " of ", microbatches_, " microbatch gradients at the end of the step");
  }
  inner_->finish_grads();
  add_tied_root();
}

int64_t canonical_buffers_per_unit(const std::vector<int64_t>& order) {
  if (order.size() <= 1) return 0;
  CanonicalTree<int> tree(static_cast<int64_t>(order.size()));
  int64_t most = 0;
  for (const int64_t m : order) {
    most = std::max(most, static_cast<int64_t>(tree.nodes().size()) + 1);
    tree.insert(
        m, 0, [](int&, int&) {}, [](int) {});
  }
  return most;
}

}  // namespace mt

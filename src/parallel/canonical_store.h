// The canonical mode's store (parallel/canonical.h): a decorator of the run's
// store (LocalStore or DataParallelStore) that makes each unit's gradient the
// canonical tree over the step's microbatches (core/exact_sum.h CanonicalTree),
// whatever the schedule. Each backward accumulates into a zeroed leaf of its
// own; release_grads places the leaf at its microbatch's position, sibling
// blocks are added as soon as both exist, and when the unit's last microbatch
// is in, the root is copied into the inner store's buffer and released there —
// once per step, so the inner store reduces it over dp (by SumOrder::tree)
// exactly as it would one microbatch. With one microbatch the leaf is the inner
// store's own buffer (the same bits: both start at zero).
//
// The partial sums it keeps are gradient memory (MemKind::grad), pooled per
// unit and kept across steps (canonical_buffers_per_unit).
//
// A LM head tied to the embedding of its own stage keeps its gradient apart
// (keeps_tied_apart): its leaves, zeroed, form a second tree over the same
// microbatches, whose root is summed over the store's group by SumOrder::tree
// and added to the embedding's reduced gradient once, after finish_grads —
// the embedding's tree + the head's, the order the pipeline's tied exchange
// gives (train_step.cpp) when the two sit on the first and the last stage. Its
// buffers are max(1, canonical_buffers_per_unit) of the embedding unit's size.
// Under cp (cp_pieces.h) each leaf already holds the tree over the rank's
// pieces and the group is dp × cp, so each root is the tree over microbatches
// of the tree over pieces, and the sum of the two is still last.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "comm/group.h"
#include "core/exact_sum.h"
#include "core/tensor.h"
#include "parallel/store.h"

namespace mt {

class CanonicalStore : public ParamStore {
 public:
  // over: the inner store's group (null: one process), for the tied head's sum.
  CanonicalStore(std::unique_ptr<ParamStore> inner, std::vector<UnitSpec> units, Group* over = nullptr);

  const float* acquire_params(int unit, Pass pass) override { return inner_->acquire_params(unit, pass); }
  void release_params(int unit, Pass pass) override { inner_->release_params(unit, pass); }
  float* acquire_grads(int unit) override;
  void release_grads(int unit) override;
  void poll() override { inner_->poll(); }
  StoreSharding sharding() const override { return inner_->sharding(); }

  void begin_step(int64_t microbatches) override;
  void begin_microbatch(int64_t index, int64_t microbatch) override;
  void finish_grads() override;
  double grad_sum_squares() override { return inner_->grad_sum_squares(); }
  void grad_sum_squares_exact(ExactSum& acc) override { inner_->grad_sum_squares_exact(acc); }
  float* local_params() override { return inner_->local_params(); }
  float* local_grads() override { return inner_->local_grads(); }
  int64_t local_numel() const override { return inner_->local_numel(); }
  std::vector<DecayRange> local_decay_ranges() const override { return inner_->local_decay_ranges(); }
  float* local_grad_of(const std::string& name, int64_t* n) override {
    return inner_->local_grad_of(name, n);
  }
  float* local_param_of(const std::string& name, int64_t* n) override {
    return inner_->local_param_of(name, n);
  }
  void after_update() override { inner_->after_update(); }
  void add_reduced_grads(int unit, const float* full) override { inner_->add_reduced_grads(unit, full); }
  float* exchanged_grad_of(const std::string& name, int64_t* n) override {
    return inner_->exchanged_grad_of(name, n);
  }
  void after_grad_exchange(const std::string& name) override { inner_->after_grad_exchange(name); }
  bool keeps_tied_apart() const override { return true; }
  float* acquire_tied_grads(int unit) override;
  void release_tied_grads(int unit) override;
  void gather_full_params(float* out) override { inner_->gather_full_params(out); }
  void scatter_full_params(const float* full) override { inner_->scatter_full_params(full); }
  void init_params(const ParamFill& fill) override { inner_->init_params(fill); }

 private:
  struct UnitTree {
    CanonicalTree<int> tree;   // values: indices into bufs
    std::vector<Tensor> bufs;  // the unit's pooled partial sums
    std::vector<int> free;
    int open = -1;                 // the leaf of the current microbatch, between acquire and release
    int64_t open_microbatch = -1;  // which microbatch it belongs to
  };
  int take_buffer(UnitTree& t, int unit);
  float* buffer(UnitTree& t, int i) { return t.bufs[static_cast<size_t>(i)].data(); }

  void add_tied_root();  // finish_grads: the tied head's root over the group, into the embedding's

  std::unique_ptr<ParamStore> inner_;
  std::vector<UnitSpec> units_;
  std::vector<UnitTree> trees_;
  Group* over_ = nullptr;
  UnitTree tied_;  // the tied head's leaves (unit tied_unit_)
  int tied_unit_ = -1;
  int tied_root_ = -1;  // its root once complete
  int64_t microbatches_ = 1;
  int64_t current_ = 0;  // the microbatch of the backward in progress (its leaf's position)
};

// The buffers of its unit's size that CanonicalStore keeps per unit when a
// step's backwards arrive in `order` (the schedule's microbatch numbers): none
// for one microbatch, else the most partial sums alive when a leaf arrives,
// plus that leaf (max popcount(t) + 1 over t < M in ascending order). The pools
// are kept across steps, so this times the chunk's gradient elements is what it
// holds from the first step on (the memory model's canonical partial sums,
// cost/memory_model.cpp).
int64_t canonical_buffers_per_unit(const std::vector<int64_t>& order);

}  // namespace mt

// The canonical mode's expert gradients under expert parallelism
// (docs/PARALLELISM.md "The canonical mode", "Expert parallelism").
//
// With ep > 1 the rank holding an expert receives, at each microbatch, the
// rows of every source rank of its ep group: ep atoms at once. In one process
// an expert's gradient is the canonical tree (core/exact_sum.h) over the
// step's atoms, each atom's leaf its own product over its own rows. So the
// holder runs each source atom's rows as their own products and puts each
// source's weight-gradient contribution at its atom's position in a tree over
// the ep group's atoms: source i's microbatch m is atom i·M + m of the group's
// ep·M (M microbatches a rank), and the group's atoms are the aligned block
// g·ep·M … of the step's global atoms (dp rank r holds atoms r·M …, and the ep
// group g is dp ranks g·ep …). With ep·M a power of two that block is a
// subtree of the one tree over all atoms; the ep_replicas' sum of the roots by
// SumOrder::tree (ranks in group order) completes it, as the dense part's dp
// sum does.
#pragma once

#include <cstdint>
#include <vector>

#include "core/exact_sum.h"
#include "core/tensor.h"

namespace mt::ep {

class ExpertLeaves {
 public:
  // numel: the rank's expert gradients of one MoE layer (local experts × their weights).
  explicit ExpertLeaves(int64_t numel = 0) : numel_(numel) {}

  // Before the step's first backward: `atoms` leaves (ep × microbatches a rank).
  void begin_step(int64_t atoms);
  // A zeroed buffer [numel] for one source atom's contribution; pooled.
  float* take();
  // Places a taken buffer at leaf `atom` (siblings are added as soon as both exist).
  void insert(int64_t atom, float* leaf);
  bool complete() const { return tree_.complete(); }
  // After the last leaf: the root (valid until the next begin_step).
  const float* root();
  // The buffers the pool holds from the first step on when the rank's
  // backwards run `microbatches` (the schedule's order) over an ep group of
  // `ep` ranks: the most alive at once (the memory model's expert leaves).
  static int64_t buffers_for(const std::vector<int64_t>& microbatches, int64_t ep);
  int64_t numel() const { return numel_; }

 private:
  int index_of(const float* p) const;

  int64_t numel_ = 0;
  CanonicalTree<int> tree_;
  std::vector<Tensor> bufs_;  // MemKind::grad, kept across steps
  std::vector<int> free_;
  int root_ = -1;
};

// The atom order in which a holder inserts its leaves over a step: at each of
// the rank's microbatches (in `microbatches`, the schedule's backward order),
// one leaf per source of the ep group of `ep` ranks.
std::vector<int64_t> expert_leaf_order(const std::vector<int64_t>& microbatches, int64_t ep);

}  // namespace mt::ep

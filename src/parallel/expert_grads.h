// What data parallelism does differently for the experts under expert
// parallelism (docs/PARALLELISM.md "Expert parallelism"): an expert's
// gradient is summed over the ranks holding a copy of it (its replica group,
// dp·cp/ep ranks), never over the ranks holding other experts; the gradient
// norm counts each expert once (a sum over the ep group).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/group.h"
#include "parallel/store.h"

namespace mt {

// A contiguous range [begin, end) of a flat gradient buffer whose parameters
// are all experts or all not.
struct GradRun {
  int64_t begin = 0, end = 0;
  bool expert = false;
};

// The range [begin, end) of `units`' flat buffer cut into runs at the
// boundaries between expert and other parameters (one run when none is an expert).
std::vector<GradRun> grad_runs(const std::vector<UnitSpec>& units, int64_t begin, int64_t end);

// Starts the sum of grads[begin, end) (a range of `units`' flat buffer): each
// run of experts over `replicas` (null or size 1: not reduced), each other run
// over `dense`, each sum in `order` (SumOrder::tree in the canonical mode).
// Labels: label + " experts" / " dense".
std::vector<Work> all_reduce_runs(const std::vector<UnitSpec>& units, float* grads, int64_t begin,
                                  int64_t end, Group& dense, Group* replicas, const std::string& label,
                                  SumOrder order = SumOrder::library);

// Σ g² of a replicated full flat buffer with each expert counted once: the
// experts' squares summed over the ep group (each rank holds its own experts),
// the rest (replicated) taken from this rank. Parameters without
// norm_counted are left out.
double ep_sum_squares(const std::vector<UnitSpec>& units, const float* full, Group& ep);
// The canonical mode's form of it: each square added exactly to `acc`, the
// experts' exact sum summed over the ep group by its integer limbs.
void ep_sum_squares_exact(const std::vector<UnitSpec>& units, const float* full, Group& ep, ExactSum& acc);

}  // namespace mt

// What data parallelism does differently for the experts under expert
// parallelism (docs/PARALLELISM.md "Expert parallelism"): an expert's
// gradient is summed over the ranks holding a copy of it (its replica group,
// dp·cp/ep ranks), never over the ranks holding other experts; the gradient
// norm counts each expert once (a sum over the ep group).
#pragma once

#include <cstdint>
#include <vector>

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

// Σ g² of a full flat buffer over the parameters with norm_counted that are
// (expert = true) or are not experts.
double counted_sum_squares_of(const std::vector<UnitSpec>& units, const float* full, bool expert);

}  // namespace mt

// Global-norm gradient clipping.
#pragma once

#include <cstdint>

namespace mt {

// Σ g² over [0, n) in double, summed in fixed chunks in a fixed order: the
// result does not depend on the thread count. (Distributed callers sum these
// partial squares over the ranks that own distinct elements.)
double sum_squares(const float* g, int64_t n);

// Scales g by max_norm / norm when norm > max_norm (max_norm ≤ 0: no clipping).
// Returns the factor applied (1 when not clipped).
double clip_by_norm(float* g, int64_t n, double norm, double max_norm);

}  // namespace mt

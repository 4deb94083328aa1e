// Global-norm gradient clipping.
#pragma once

#include <cstdint>

#include "ops/optimizer_kernels.h"

namespace mt {

// Scales g by max_norm / norm when norm > max_norm (max_norm ≤ 0: no clipping).
// Returns the factor applied (1 when not clipped).
double clip_by_norm(float* g, int64_t n, double norm, double max_norm);

}  // namespace mt

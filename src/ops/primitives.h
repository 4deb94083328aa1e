// The primitives the model and the parallel layers use in place of raw loops
// over device memory: dispatchers into ops/kernels.h's table. Byte copies and
// zeroing are the device's (core/device.h copy_bytes, zero_bytes).
#pragma once

#include <cstdint>

namespace mt {

void add(float* y, const float* x, int64_t n);            // y += x
void axpy(float* y, float a, const float* x, int64_t n);  // y += a·x
void scale(float* y, float a, int64_t n);                 // y *= a

// The number of elements that are NaN or ±Inf (returned to the host).
int64_t count_nonfinite(const float* x, int64_t n);

}  // namespace mt

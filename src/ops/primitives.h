// The primitives the model and the parallel layers use in place of raw loops
// over device memory: dispatchers into ops/kernels.h's table. Byte copies and
// zeroing are the device's (core/device.h copy_bytes, zero_bytes).
#pragma once

#include <cstdint>

namespace mt {

void add(float* y, const float* x, int64_t n);            // y += x
void axpy(float* y, float a, const float* x, int64_t n);  // y += a·x
void scale(float* y, float a, int64_t n);                 // y *= a
void fill(float* y, float value, int64_t n);              // y = value
// dst[r·dst_stride + c] = src[r·src_stride + c] for r < rows, c < cols.
void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
               int64_t cols);
// dst[r·dst_stride + c] += src[r·src_stride + c] for r < rows, c < cols.
void add_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
              int64_t cols);

// The number of elements that are NaN or ±Inf (returned to the host).
int64_t count_nonfinite(const float* x, int64_t n);

}  // namespace mt

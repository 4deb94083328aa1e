#include "ops/primitives.h"

#include <cmath>
#include <cstring>

#include "ops/cpu_kernels.h"

namespace mt {

// Element-wise loops keep the order and the arithmetic of the loops they
// replace (one rounding per element), so results are bitwise those loops'.
void cpu::add(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    y[i] += x[i];
}

void cpu::axpy(float* y, float a, const float* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    y[i] += a * x[i];
}

void cpu::scale(float* y, float a, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    y[i] *= a;
}

void cpu::fill(float* y, float value, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = value;
}

void cpu::copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
                    int64_t cols) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(cols) * sizeof(float));
}

void cpu::add_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
                   int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    float* d = dst + r * dst_stride;
    const float* s = src + r * src_stride;
    for (int64_t c = 0; c < cols; ++c)
      d[c] += s[c];
  }
}

int64_t cpu::count_nonfinite(const float* x, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    bad += !std::isfinite(x[i]);
  return bad;
}

}  // namespace mt

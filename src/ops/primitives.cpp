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

int64_t cpu::count_nonfinite(const float* x, int64_t n) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i)
    bad += !std::isfinite(x[i]);
  return bad;
}

}  // namespace mt

#include "ops/swiglu.h"

#include <cstdint>

#include "ops/cpu_kernels.h"
#include "ops/vec_math.h"

namespace mt {

void cpu::swiglu_forward(float* out, const float* gu, int64_t N, int64_t F) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* g = gu + n * 2 * F;
    const float* u = g + F;
    float* h = out + n * F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      const float sig = 1.0f / (1.0f + exp_vec(-g[f]));
      h[f] = (g[f] * sig) * u[f];
    }
  }
}

void cpu::swiglu_backward(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F) {
  // d silu(g) / dg = σ(g) · (1 + g · (1 − σ(g)))
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* g = gu + n * 2 * F;
    const float* u = g + F;
    const float* dh = dout + n * F;
    float* dg = dgu + n * 2 * F;
    float* du = dg + F;
#pragma omp simd
    for (int64_t f = 0; f < F; ++f) {
      const float sig = 1.0f / (1.0f + exp_vec(-g[f]));
      du[f] = dh[f] * (g[f] * sig);
      dg[f] = dh[f] * u[f] * (sig * (1.0f + g[f] * (1.0f - sig)));
    }
  }
}

}  // namespace mt

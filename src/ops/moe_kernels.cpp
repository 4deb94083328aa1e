#include "ops/moe_kernels.h"

#include <algorithm>
#include <cstring>

#include "ops/cpu_kernels.h"
#include "ops/kernels.h"

namespace mt {

void cpu::moe_dispatch(float* xs, const float* x, const int64_t* order, int64_t R, int64_t k, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(xs + r * C, x + (order[r] / k) * C, sizeof(float) * static_cast<size_t>(C));
}

void cpu::moe_dispatch_backward(float* dx, const float* dxs, const int64_t* row_of, int64_t N, int64_t k,
                                int64_t C) {
  // Per token, its rows in slot order: a fixed order of the sum.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* d = dx + n * C;
    std::memset(d, 0, sizeof(float) * static_cast<size_t>(C));
    for (int64_t s = 0; s < k; ++s) {
      const int64_t r = row_of[n * k + s];
      if (r < 0) continue;
      const float* g = dxs + r * C;
      for (int64_t c = 0; c < C; ++c)
        d[c] += g[c];
    }
  }
}

void cpu::moe_combine(float* yk, const float* ys, const int64_t* row_of, int64_t choices, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < choices; ++c) {
    const int64_t r = row_of[c];
    if (r < 0)
      std::memset(yk + c * C, 0, sizeof(float) * static_cast<size_t>(C));
    else
      std::memcpy(yk + c * C, ys + r * C, sizeof(float) * static_cast<size_t>(C));
  }
}

void cpu::moe_combine_backward(float* dys, const float* dyk, const int64_t* order, int64_t R, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(dys + r * C, dyk + order[r] * C, sizeof(float) * static_cast<size_t>(C));
}

void cpu::moe_weighted_sum(float* y_out, const float* mid, const float* w, const float* yk, int64_t N,
                           int64_t k, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* y = y_out + n * C;
    std::copy(mid + n * C, mid + (n + 1) * C, y);
    for (int64_t s = 0; s < k; ++s) {
      const float ws = w[n * k + s];
      const float* v = yk + (n * k + s) * C;
      for (int64_t c = 0; c < C; ++c)
        y[c] += ws * v[c];
    }
  }
}

void cpu::moe_weighted_sum_backward(float* dyk, float* dw, const float* dy, const float* w, const float* yk,
                                    int64_t N, int64_t k, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* d = dy + n * C;
    for (int64_t s = 0; s < k; ++s) {
      const int64_t c = n * k + s;
      const float wc = w[c];
      const float* v = yk + c * C;
      float* g = dyk + c * C;
      double dot = 0.0;
      for (int64_t j = 0; j < C; ++j) {
        g[j] = wc * d[j];
        dot += static_cast<double>(d[j]) * v[j];
      }
      dw[c] = static_cast<float>(dot);
    }
  }
}

void moe_dispatch(float* xs, const float* x, const int64_t* order, int64_t R, int64_t k, int64_t C) {
  kernels().moe_dispatch(xs, x, order, R, k, C);
}
void moe_dispatch_backward(float* dx, const float* dxs, const int64_t* row_of, int64_t N, int64_t k,
                           int64_t C) {
  kernels().moe_dispatch_backward(dx, dxs, row_of, N, k, C);
}
void moe_combine(float* yk, const float* ys, const int64_t* row_of, int64_t choices, int64_t C) {
  kernels().moe_combine(yk, ys, row_of, choices, C);
}
void moe_combine_backward(float* dys, const float* dyk, const int64_t* order, int64_t R, int64_t C) {
  kernels().moe_combine_backward(dys, dyk, order, R, C);
}
void moe_weighted_sum(float* y, const float* mid, const float* w, const float* yk, int64_t N, int64_t k,
                      int64_t C) {
  kernels().moe_weighted_sum(y, mid, w, yk, N, k, C);
}
void moe_weighted_sum_backward(float* dyk, float* dw, const float* dy, const float* w, const float* yk,
                               int64_t N, int64_t k, int64_t C) {
  kernels().moe_weighted_sum_backward(dyk, dw, dy, w, yk, N, k, C);
}

}  // namespace mt

#include "ops/optimizer_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu_kernels.h"

namespace mt {

void cpu::adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr,
                       double beta1, double beta2, double eps, double weight_decay, int64_t t) {
  const AdamMoments adam(beta1, beta2, eps, t);
  const float lr_f = static_cast<float>(lr);
  const float decay = static_cast<float>(lr * weight_decay);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float update = adam.direction(grads[i], m[i], v[i]);
    params[i] = params[i] - decay * params[i] - lr_f * update;
  }
}

void cpu::sgd_update(float* params, const float* grads, float* buf, int64_t n, double lr, double momentum,
                     bool nesterov, double weight_decay) {
  const float lr_f = static_cast<float>(lr), mu = static_cast<float>(momentum);
  const float wd = static_cast<float>(weight_decay);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float d = grads[i] + wd * params[i];
    if (buf != nullptr) {
      // b starts at 0, so the first step's b = d, as PyTorch's clone of d.
      const float b = mu * buf[i] + d;
      buf[i] = b;
      d = nesterov ? d + mu * b : b;
    }
    params[i] -= lr_f * d;
  }
}

void cpu::lamb_direction(const float* params, float* grads, float* m, float* v, int64_t n, double beta1,
                         double beta2, double eps, double weight_decay, int64_t t) {
  const AdamMoments adam(beta1, beta2, eps, t);
  const float wd = static_cast<float>(weight_decay);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    grads[i] = adam.direction(grads[i], m[i], v[i]) + wd * params[i];
}

double cpu::sum_squares(const float* g, int64_t n) {
  constexpr int64_t kChunk = 4096;
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(n_chunks));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    double s = 0.0;
    for (int64_t i = c * kChunk; i < end; ++i)
      s += static_cast<double>(g[i]) * g[i];
    partial[static_cast<size_t>(c)] = s;
  }
  double total = 0.0;
  for (double s : partial)
    total += s;
  return total;
}

}  // namespace mt

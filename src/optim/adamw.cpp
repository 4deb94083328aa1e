#include "optim/adamw.h"

#include <cmath>

namespace mt {

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t t) {
  const float b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(beta1, static_cast<double>(t))));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(beta2, static_cast<double>(t))));
  const float lr_f = static_cast<float>(lr), eps_f = static_cast<float>(eps);
  const float decay = static_cast<float>(lr * weight_decay);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    const float mi = b1 * m[i] + (1.0f - b1) * g;
    const float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float update = (mi * c1) / (std::sqrt(vi * c2) + eps_f);
    params[i] = params[i] - decay * params[i] - lr_f * update;
  }
}

}  // namespace mt

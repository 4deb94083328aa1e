#include "optim/adamw.h"

#include <cmath>

namespace mt {

void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t t) {
  const AdamMoments adam(beta1, beta2, eps, t);
  const float lr_f = static_cast<float>(lr);
  const float decay = static_cast<float>(lr * weight_decay);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float update = adam.direction(grads[i], m[i], v[i]);
    params[i] = params[i] - decay * params[i] - lr_f * update;
  }
}

}  // namespace mt

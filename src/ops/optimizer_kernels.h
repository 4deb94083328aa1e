// The optimizers' element updates and the gradient norm's sum of squares:
// kernels of ops/kernels.h's table (the formulas are optim/adamw.h's and
// optim/optimizer.h's), so that an optimizer step runs on the run's device.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/exact_sum.h"

namespace mt {

// The bias-corrected Adam direction m̂ / (√v̂ + ε) of one element at step t,
// its moments updated in place: what AdamW and LAMB (optim/optimizer.h) share.
struct AdamMoments {
  float b1, b2, c1, c2, eps;
  AdamMoments(double beta1, double beta2, double epsilon, int64_t t)
      : b1(static_cast<float>(beta1)),
        b2(static_cast<float>(beta2)),
        c1(static_cast<float>(1.0 / (1.0 - std::pow(beta1, static_cast<double>(t))))),
        c2(static_cast<float>(1.0 / (1.0 - std::pow(beta2, static_cast<double>(t))))),
        eps(static_cast<float>(epsilon)) {}
  float direction(float g, float& m, float& v) const {
    const float mi = b1 * m + (1.0f - b1) * g;
    const float vi = b2 * v + (1.0f - b2) * g * g;
    m = mi;
    v = vi;
    return (mi * c1) / (std::sqrt(vi * c2) + eps);
  }
};

// One element's update, exposed for the golden tests (docs/MODEL.md, "Optimizer and schedule").
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t t);
// SGD with coupled weight decay and momentum buffer `buf` (null: no momentum).
void sgd_update(float* params, const float* grads, float* buf, int64_t n, double lr, double momentum,
                bool nesterov, double weight_decay);
// LAMB's first pass: the moments, then grads ← r (optim/optimizer.h).
void lamb_direction(const float* params, float* grads, float* m, float* v, int64_t n, double beta1,
                    double beta2, double eps, double weight_decay, int64_t t);
// Σ g² over [0, n) in double, summed in fixed chunks in a fixed order: the
// result does not depend on the thread count. (Distributed callers sum these
// partial squares over the ranks that own distinct elements.) Returned to the
// host: a crossing.
double sum_squares(const float* g, int64_t n);
// The canonical mode's form: each g² added exactly to the host accumulator
// `acc` (core/exact_sum.h), so the total does not depend on any order or split.
void exact_sum_squares(ExactSum& acc, const float* g, int64_t n);

}  // namespace mt

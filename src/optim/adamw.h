// AdamW (Loshchilov & Hutter) over a flat parameter buffer (optim/optimizer.h
// holds it with the other optimizers):
//   m ← β₁m + (1−β₁)g;  v ← β₂v + (1−β₂)g²
//   m̂ = m / (1−β₁ᵗ);    v̂ = v / (1−β₂ᵗ)
//   θ ← θ − lr·(m̂ / (√v̂ + ε) + λ·θ)      (λ only where weight decay applies)
// Each element's update depends only on its own θ, g, m, v — which is why the
// state can later be sharded across data-parallel ranks (ZeRO) unchanged.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace mt {

struct AdamWOptions {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
};

// A contiguous range of the flat buffer and whether weight decay applies to it.
struct DecayRange {
  int64_t offset = 0;
  int64_t numel = 0;
  bool decay = true;
};

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

}  // namespace mt

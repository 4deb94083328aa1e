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
#include "ops/optimizer_kernels.h"

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

}  // namespace mt

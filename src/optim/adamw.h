// AdamW (Loshchilov & Hutter) over a flat parameter buffer:
//   m ← β₁m + (1−β₁)g;  v ← β₂v + (1−β₂)g²
//   m̂ = m / (1−β₁ᵗ);    v̂ = v / (1−β₂ᵗ)
//   θ ← θ − lr·(m̂ / (√v̂ + ε) + λ·θ)      (λ only where weight decay applies)
// Each element's update depends only on its own θ, g, m, v — which is why the
// state can later be sharded across data-parallel ranks (ZeRO) unchanged.
#pragma once

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

class AdamW {
 public:
  // State for n elements; `ranges` cover [0, n) and say where decay applies.
  AdamW(int64_t n, const AdamWOptions& opts, std::vector<DecayRange> ranges);

  // One update at learning rate lr (the step count advances by one).
  void step(float* params, const float* grads, double lr);
  int64_t steps_taken() const { return t_; }
  const Tensor& m() const { return m_; }
  const Tensor& v() const { return v_; }
  // Restoring a checkpoint (train/checkpoint.h): the moments are written in
  // place, then the step count is set to the one saved with them.
  float* m_data() { return m_.data(); }
  float* v_data() { return v_.data(); }
  void set_steps_taken(int64_t t) { t_ = t; }

 private:
  int64_t n_;
  AdamWOptions opts_;
  std::vector<DecayRange> ranges_;
  Tensor m_, v_;
  int64_t t_ = 0;
};

// One element's update, exposed for the golden tests (docs/MODEL.md, "Optimizer and schedule").
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t t);

}  // namespace mt

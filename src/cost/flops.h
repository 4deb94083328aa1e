// Analytic FLOPs of a training step, and this machine's matrix-product rate
// at the run's precision (the ceiling MFU is measured against).
#pragma once

#include <algorithm>
#include <cstdint>

#include "model/config.h"

namespace mt {

// Parameters that take part in matrix products: everything except the input
// embedding table (a lookup) and the norm weights; the LM head counts even when
// it is tied to the embedding. A mixture-of-experts layer counts its active
// parameters: the router and top_k experts (docs/MODEL.md).
int64_t matmul_params(const ModelConfig& cfg);

// FLOPs of forward + backward per token at sequence length T:
//   6 · matmul_params  +  6 · n_layers · n_heads · head_dim · T
// The second term is causal attention (QKᵀ and PV: 4·T·H·D per token forward,
// halved by the causal mask, ×3 for forward + backward).
double train_flops_per_token(const ModelConfig& cfg, int64_t seq_len);

// GFLOP/s of n×n products with the current thread count, best of the
// repetitions run within about `seconds` (at least min_reps), through the path
// the run's products take: ops/gemm.h's sgemm at the current matmul precision and bf16 kernel — OpenBLAS fp32, or
// under bf16 the emulated kernel or oneDNN, the rounding of both operands
// included as in training.
double measure_matmul_gflops(int64_t n = 1024, double seconds = 0.5, int min_reps = 3);

// What measure_matmul_gflops measures now, as the metrics' `mfu_ceiling`
// names it: "sgemm" (fp32), "bf16 onednn gemm" or "bf16 emulated gemm".
const char* matmul_ceiling_name();

// The ceiling MFU is measured against (docs/BENCHMARKS.md, "Definitions"):
// the best matrix-product rate measured at the run's precision (start-up
// windows, and re-measures during a long run; fp32 runs against the SGEMM
// rate, bf16 runs against the bf16 kernel's), raised to the best model-FLOP
// rate any step achieved. Other work on the machine can hold the cores during
// every measuring window, and the achieved rate is then above the measured
// one; with the achieved rate in the ceiling, MFU = achieved / ceiling ≤ 1 by
// construction. `measured_name` names the measurement (matmul_ceiling_name()).
class MfuCeiling {
 public:
  explicit MfuCeiling(const char* measured_name = "sgemm") : name_(measured_name) {}
  void measured(double gflops) { sgemm_ = std::max(sgemm_, gflops); }
  // The MFU of a step that achieved `gflops`, against the ceiling including it.
  double mfu(double gflops) {
    achieved_ = std::max(achieved_, gflops);
    return this->gflops() > 0 ? gflops / this->gflops() : 0.0;
  }
  double gflops() const { return std::max(sgemm_, achieved_); }
  double sgemm() const { return sgemm_; }  // the best measurement alone
  // Which bound the ceiling is: the measurement's name ("sgemm", "bf16 onednn
  // gemm", …) or "achieved" (a step's rate).
  const char* source() const { return achieved_ > sgemm_ ? "achieved" : name_; }

 private:
  const char* name_;
  double sgemm_ = 0, achieved_ = 0;
};

}  // namespace mt

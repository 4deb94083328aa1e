// `meshtrain compare`: are two runs the same run? Per-step losses and gradient
// norms from two metrics files, and optionally every tensor of two model
// directories.
#pragma once

#include <string>

namespace mt {

struct CompareOptions {
  std::string metrics_a, metrics_b;
  std::string model_a, model_b;  // optional model directories
  double rtol = 1e-5;
  // Tolerance of the per-step grad_norm; < 0: rtol. Gradient norms are more
  // sensitive to summation order than losses (a norm of gradients whose
  // elements are sums of cancelling terms), so a check may state its own.
  double grad_norm_rtol = -1;
  // Tolerance of the tensors' relative L2 distance; < 0: rtol. The parity
  // suites derive each of the three from a float64 run (tests/dist/common.sh).
  double tensor_rtol = -1;
};

struct CompareResult {
  bool ok = true;
  std::string report;  // human-readable: steps compared, worst step, worst tensor
};

// Losses and grad_norm: |a − b| / |b| per step (the step sets must match;
// grad_norm is skipped, with a line saying so, only when neither file records
// it). Tensors: relative L2 distance ‖a − b‖ / ‖b‖ per tensor (names and shapes
// must match). Every comparison must be within its tolerance for ok.
CompareResult compare_runs(const CompareOptions& opts);

}  // namespace mt

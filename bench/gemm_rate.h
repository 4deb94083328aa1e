// The MFU ceiling: this machine's SGEMM rate, measured in the same run as the
// training steps it is compared with (docs/BENCHMARKS.md, "Definitions").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

namespace mt::bench {

struct GemmRate {
  std::string shape;  // "MxNxK what"
  double gflops = 0;
};

// The 1024³ rate (cost/flops.h measure_matmul_gflops, the trainer's ceiling)
// and the rates of the model's own forward GEMM shapes at `tokens` rows, all
// at the current matmul precision and bf16 kernel (the run's). The caller measures twice
// (before and after the timed steps) and keeps the higher of each: on a shared
// machine the slower measurement is the one that was disturbed.
std::vector<GemmRate> measure_gemm_rates(const ModelConfig& cfg, int64_t tokens, double seconds_each);

// Element-wise maximum of two measurements of the same shapes.
std::vector<GemmRate> max_rates(const std::vector<GemmRate>& a, const std::vector<GemmRate>& b);

}  // namespace mt::bench

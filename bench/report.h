// The results of one meshtrain_bench run: a readable table on stdout and the
// same figures as JSON for scripts/bench.sh.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/memory.h"
#include "gemm_rate.h"

namespace mt::bench {

struct BenchResult {
  std::string config_path;
  std::string precision = "fp32";      // train.precision of the products (--precision)
  std::string matmul;                  // what computes them: "OpenBLAS sgemm", or bf16_kernel_description()
  std::string ceiling_name = "sgemm";  // what the GEMM rates measure: cost/flops.h matmul_ceiling_name()
  int threads = 0;
  int64_t batch = 0, seq_len = 0, microbatch = 0;
  int64_t num_params = 0, matmul_params = 0;
  double flops_per_token = 0;                    // train_flops_per_token (cost/flops.h)
  std::vector<double> step_seconds;              // the timed steps, in order
  std::vector<double> losses;                    // loss of every step, warm-up included (a sanity check)
  std::vector<GemmRate> gemm_before;             // measured before the timed steps
  std::vector<GemmRate> gemm_after;              // and after
  std::array<int64_t, kNumMemKinds> mem_peak{};  // bytes, over the timed steps
  int64_t mem_peak_total = 0;
  // Seconds per kernel family over the profiled steps, plus "optimizer"
  // (zero_grads, norm, clip, AdamW) and "unattributed" (the rest of the step).
  std::vector<std::pair<std::string, double>> kernel_seconds;
  double profiled_seconds = 0;  // wall time of the profiled steps
  int64_t profiled_steps = 0;

  int64_t tokens_per_step() const { return batch * seq_len; }
  double flops_per_step() const { return flops_per_token * static_cast<double>(tokens_per_step()); }
  double median_step_s() const;
  double min_step_s() const;  // the least disturbed step on a shared machine
  double tokens_per_s() const { return static_cast<double>(tokens_per_step()) / median_step_s(); }
  double achieved_gflops() const { return flops_per_step() / median_step_s() / 1e9; }
  // The 1024³ rate is fp32 whatever the run's precision (train/flops.h); the
  // model's shapes are measured in the run's precision and bf16 kernel.
  double sgemm_1024() const;  // the 1024³ rate, higher of before and after
  double sgemm_max() const;   // the highest rate of every shape, before and after
};

void print_table(const BenchResult& r);
void write_json(const BenchResult& r, const std::string& path);

}  // namespace mt::bench

// The training loop of one process: sample the step's global batch, run its
// microbatches forward and backward (gradient accumulation), normalise by the
// global valid-token count, clip, AdamW, log, evaluate.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"

namespace mt {

struct RunOptions {
  std::string metrics_path;  // one JSON object per line, per step (empty: none)
  std::string save_dir;      // Hugging Face model directory written at the end (empty: none)
  std::string init_from;     // model directory to start from instead of the seed's initialisation
  bool quiet = false;        // no log lines on stdout
  bool profile = false;      // per-kernel time shares (slightly slower)
};

struct StepStats {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  int64_t tokens = 0;  // valid target tokens in the global batch
  double step_time_s = 0, tokens_per_s = 0, mfu = 0;
  int64_t mem_peak_bytes = 0;
  bool skipped = false;  // NaN/Inf loss or gradient norm: no update
};

struct RunResult {
  std::vector<StepStats> steps;
  std::vector<std::pair<int64_t, double>> val_losses;          // (step, loss)
  double sgemm_gflops = 0;                                     // the MFU ceiling measured at start-up
  std::vector<std::pair<std::string, double>> kernel_seconds;  // with RunOptions::profile
};

// Runs cfg (validated here) to completion; throws mt::Error on bad input or
// after train.max_bad_steps consecutive non-finite steps.
RunResult run_training(const Config& cfg, const RunOptions& opts);

}  // namespace mt

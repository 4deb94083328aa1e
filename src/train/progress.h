// How far a training run is and how fast it goes: the expected time left
// after each step (the log's eta), and the MFU ceiling's measurements
// (flops.h MfuCeiling; docs/BENCHMARKS.md, "Definitions").
#pragma once

#include <cstdint>
#include <string>

#include "config/config.h"
#include "core/timer.h"
#include "cost/flops.h"
#include "train/run_mesh.h"

namespace mt {

// The run's clock from its first step on: the time left after a step is the
// mean step time so far times the steps still to run.
class Progress {
 public:
  Progress(int64_t first_step, int64_t steps) : first_(first_step), steps_(steps) {}
  double eta_s(int64_t step) const {
    const auto done = static_cast<double>(step - first_ + 1);
    return clock_.seconds() / done * static_cast<double>(steps_ - step - 1);
  }
  int64_t first_step() const { return first_; }

 private:
  Timer clock_;
  int64_t first_, steps_;
};

// "42s", "3m05s", "1h02m".
std::string format_duration(double seconds);

// The whole job's matrix-product rate at the run's precision (flops.h
// measure_matmul_gflops: the SGEMM rate in fp32, the bf16 kernel's in bf16;
// every rank measures at the same moment, after a barrier, with its own
// threads; the rates are summed): the best of `windows` windows of about
// `seconds` each. Collective; its two calls are recorded in the ledger
// outside any step.
double job_sgemm_gflops(const RunMesh& mesh, int windows = 3, double seconds = 0.1);

// Runs of at least 100 steps measure that rate again after the steps at
// one and two thirds of the run, and the ceiling keeps the best (a machine
// busy at start-up may be free later). Collective; every rank calls it after
// every step.
void remeasure_ceiling(const RunMesh& mesh, const TrainConfig& tc, int64_t step, MfuCeiling& ceiling);

}  // namespace mt

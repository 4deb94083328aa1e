// The time model: one step of a layout on a machine, from FLOPs ÷ rate, the
// α-β cost of each axis's collectives, what of them runs behind compute, and
// the pipeline bubble (docs/PLANNER.md, "Time model").
#pragma once

#include <string>
#include <vector>

#include "cost/memory_estimate.h"
#include "plan/collectives.h"  // collective_time
#include "plan/layout.h"
#include "plan/machine.h"

namespace mt::plan {

// One axis's communication in a step, per rank.
struct AxisComm {
  std::string axis;     // dp | tp | pp | cp | ep
  std::string what;     // "grad all-reduce 2.3 GiB over 64 ranks (crosses nodes)"
  double bytes = 0;     // buffer bytes this rank puts into the axis's collectives per step
  double total_s = 0;   // their α-β time
  double hidden_s = 0;  // of it, behind independent compute
  bool crosses_nodes = false;
  double exposed_s() const { return total_s - hidden_s; }
};

struct Prediction {
  PlanLayout layout;
  MemoryEstimate memory;  // one rank, machine precision
  bool fits = true;
  int64_t microbatches = 1;  // per pipeline per step
  double compute_s = 0;      // GEMMs and attention of the busiest stage, incl. recomputation
  double recompute_s = 0;    // of compute_s
  double elementwise_s = 0;  // memory-bound work (norms, activations, softmax) at the memory rate
  double bubble_s = 0, bubble_fraction = 0;
  double optimizer_s = 0;
  std::vector<AxisComm> comm;
  double step_s = 0;
  double model_flops = 0;  // per step: cost/flops.h's count (no recomputation)
  double mfu = 0;          // model_flops / (step_s × the devices' peak)
  double exposed_comm_s() const;
};

// ConfigError (check_layout) when the layout cannot run the input.
Prediction predict(const PlanInput& in, const PlanLayout& l, const Machine& m);
// The same with the layout's memory given (plan_memory(in, l, m), which
// depends on the node order only through hier's g): the search plans one
// layout under several orders and estimates its memory once.
Prediction predict(const PlanInput& in, const PlanLayout& l, const Machine& m, const MemoryEstimate& memory);

// FLOPs of a training step with full recomputation as the published runs of
// docs/PLANNER.md ("Validation against published runs") count them,
// 96·B·s·l·h²·(1 + s/6h + V/16lh): how their per-GPU throughput is stated.
double narayanan_flops(const ModelConfig& m, int64_t global_batch, int64_t seq_len);

}  // namespace mt::plan

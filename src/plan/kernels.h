// A model's kernels measured on this machine as a training step runs them
// (for `meshtrain calibrate --config`): its layer GEMMs by shape, one layer's
// attention and element-wise work, and the optimizer's pass over the state —
// what the time model charges a calibrated machine instead of the best-case
// SGEMM and memory-rate estimates (docs/PLANNER.md, "Calibration").
#pragma once

#include <functional>
#include <vector>

#include "model/config.h"
#include "plan/machine.h"

namespace mt::plan {

// Node seconds per call of a function (calibrate's timing over the ranks that
// run it at once).
using NodeSeconds = std::function<double(const std::function<void()>&)>;

// Seconds of one layer's forward + backward of `batch` sequences of `seq_len`
// tokens: attention, and RMSNorm ×2 + RoPE on q and k + SwiGLU, each timed by
// `seconds_per_call` (calibrate's node-wide timing).
LayerKernels measure_layer_kernels(const ModelConfig& m, int64_t batch, int64_t seq_len,
                                   const NodeSeconds& seconds_per_call);

// Node seconds per parameter of the optimizer's pass over `params` elements:
// the gradient's sum of squares, clipping and AdamW, as a step runs them.
double measure_optimizer_pass(int64_t params, const NodeSeconds& seconds_per_call);

// The node's rate of each GEMM of a layer (q/k/v, o, the fused MLP up and
// gate, MLP down) and of the head at `rows` rows with the output columns (q/k/v,
// MLP up, head) or input columns (o, MLP down) split tp ways, run as a step
// runs them: forward through the layers, each with its own weights and
// activations (up to n_layers, within a memory budget), then the head, then
// backward in reverse (input gradient, weight gradient added), each call
// timed. Caches then hold what they hold in training, which repeating one
// shape on the same buffers (the best case) does not show. Shapes as
// GemmRate's: C[m = rows, n = outputs] from k = inputs.
std::vector<GemmRate> measure_layer_gemms(const ModelConfig& m, int64_t rows, int64_t tp,
                                          const NodeSeconds& seconds_per_call);

}  // namespace mt::plan

// The non-GEMM kernels of one decoder layer measured on this machine (for
// `meshtrain calibrate --config`): what the time model charges a calibrated
// machine for attention and element-wise work instead of the memory-rate
// estimate (docs/PLANNER.md, "Calibration").
#pragma once

#include <functional>

#include "model/config.h"
#include "plan/machine.h"

namespace mt::plan {

// Seconds of one layer's forward + backward of `batch` sequences of `seq_len`
// tokens: attention, and RMSNorm ×2 + RoPE on q and k + SwiGLU, each timed by
// `seconds_per_call` (calibrate's node-wide timing).
LayerKernels measure_layer_kernels(
    const ModelConfig& m, int64_t batch, int64_t seq_len,
    const std::function<double(const std::function<void()>&)>& seconds_per_call);

}  // namespace mt::plan

// Evaluation of a trained model (generation: src/infer/).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "data/token_file.h"
#include "model/llama.h"

namespace mt {

// Mean next-token loss over the first `max_windows` consecutive
// non-overlapping windows of seq_len tokens (all windows when max_windows ≤ 0),
// run `microbatch` windows at a time. Every target token counts equally.
double evaluate_loss(Llama& model, const TokenFile& file, int64_t seq_len, int64_t max_windows,
                     int64_t microbatch);

// The same with any forward that returns the loss sum of a microbatch
// (inputs, targets [B, T]) — a pipeline's, for instance.
using LossForward =
    std::function<double(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T)>;
double evaluate_loss(const LossForward& forward, const TokenFile& file, int64_t seq_len, int64_t max_windows,
                     int64_t microbatch);

}  // namespace mt

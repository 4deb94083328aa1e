// Evaluation and generation with a trained model.
#pragma once

#include <cstdint>
#include <vector>

#include "data/token_file.h"
#include "model/llama.h"

namespace mt {

// Mean next-token loss over the first `max_windows` consecutive
// non-overlapping windows of seq_len tokens (all windows when max_windows ≤ 0),
// run `microbatch` windows at a time. Every target token counts equally.
double evaluate_loss(Llama& model, const TokenFile& file, int64_t seq_len, int64_t max_windows,
                     int64_t microbatch);

// Greedy decoding: appends `n_new` tokens to `prompt` (the context is the last
// max_seq tokens of the model's buffers). Recomputes the whole context per token.
std::vector<int32_t> generate_greedy(Llama& model, std::vector<int32_t> prompt, int64_t n_new);

}  // namespace mt

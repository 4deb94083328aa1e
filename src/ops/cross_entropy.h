// Softmax cross-entropy over the vocabulary, with an ignore index.
#pragma once

#include <cstdint>

namespace mt {

// losses[n] = lse[n] − logits[n, targets[n]], lse[n] = log Σ_v exp(logits[n, v]);
// losses[n] = 0 for targets[n] == ignore_index. logits [N, V].
void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t N,
                           int64_t V, int32_t ignore_index);

// dlogits[n, :] = dloss · (softmax(logits[n]) − onehot(targets[n])), assigned;
// zero rows for ignored targets. dloss is the same for every token (the loss is
// a mean over the global batch's valid tokens). May run in place (dlogits == logits).
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            float dloss, int64_t N, int64_t V, int32_t ignore_index);

}  // namespace mt

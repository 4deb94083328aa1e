// The router of a mixture-of-experts layer (Mixtral; docs/MODEL.md "Mixture of
// experts"): a softmax over the E router logits of each token in fp32, the
// top k experts by score (the probability, plus a per-expert bias when
// aux-loss-free balancing is on), and the chosen experts' probabilities
// renormalised to sum to 1 as their weights.
#pragma once

#include <cstdint>

namespace mt {

struct RouterDims {
  int64_t N = 0;  // tokens
  int64_t E = 0;  // experts
  int64_t k = 0;  // experts per token
};

// probs[N, E] = softmax(logits[N, E]); lse[N] = logsumexp of each row (the
// z-loss's input). experts[N, k]: the k largest scores probs + bias (bias [E]
// may be null), in decreasing order, a tie going to the lower expert index,
// so that routing is a pure function of the logits. weights[N, k] =
// probs[experts] / Σ of them (the bias never enters a weight). Returns the
// smallest gap between the k-th and (k+1)-th score over the tokens (+inf
// when k = E): where two layouts differ in the last bits, a gap this small is
// the only place their routing could differ.
double router_forward(float* probs, float* lse, int32_t* experts, float* weights, const float* logits,
                      const float* bias, RouterDims d);

// Backward: dlogits[N, E] (assigned) from dweights[N, k], plus dprob_all[E]
// added to dL/dprobs of every row (the load-balancing loss; may be null),
// plus z_scale · lse · probs (the gradient of z_scale/2 · Σ lse²).
void router_backward(float* dlogits, const float* dweights, const float* dprob_all, float z_scale,
                     const float* probs, const float* lse, const int32_t* experts, const float* weights,
                     RouterDims d);

}  // namespace mt

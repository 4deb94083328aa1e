// Choosing the next token from logits. Greedy (temperature 0) takes the
// largest logit (the lowest id among equals). Otherwise the logits are
// divided by the temperature, the top_k largest kept (0: all), then the
// smallest set of most probable tokens whose probability reaches top_p, and
// one is drawn from the renormalised distribution with a uniform number that
// is a pure function of (seed, prompt index, position): the same prompt gives
// the same continuation whatever the batch it runs in.
#pragma once

#include <cstdint>

namespace mt {

struct SamplingOptions {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: no limit
  double top_p = 1.0;        // in (0, 1]
  uint64_t seed = 0;
};

// ConfigError naming the option and the rule.
void check_sampling(const SamplingOptions& o);

struct Sampled {
  int32_t token = 0;
  double logprob = 0.0;  // log-softmax of the raw logits (temperature 1, no filtering) at `token`
};

Sampled sample_token(const float* logits, int64_t V, const SamplingOptions& o, int64_t prompt_index,
                     int64_t position);

}  // namespace mt

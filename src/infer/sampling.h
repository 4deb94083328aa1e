// Choosing the next token from logits. Greedy (temperature 0) takes the
// largest logit (the lowest id among equals). Otherwise the logits are
// divided by the temperature, the top_k largest kept (0: all), then the
// smallest set of most probable tokens whose probability reaches top_p, and
// one is drawn from the renormalised distribution with a uniform number that
// is a pure function of (seed, prompt index, position): the same prompt gives
// the same continuation whatever the batch it runs in.
//
// The logits may be sharded by vocabulary over tp (the vocab-parallel LM
// head): the token is chosen without gathering them. Candidates are the
// most probable tokens in one order (logit descending, then id ascending);
// each rank sends its own m best (value, id) and every rank merges them into
// the global m best, m growing (doubling) only while the rule needs tokens
// past them (top_k: m = top_k at once). The sums the rule needs over the
// whole vocabulary (softmax normaliser, log-sum-exp) are all-reduced. So the
// choice is the same function of the logits on any layout, up to the
// summation order of those sums (docs/MODEL.md, "Generation").
#pragma once

#include <cstdint>

#include "comm/group.h"

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

// One row of logits as this rank holds it: the tokens [begin, end) of a
// V-token vocabulary at z[0, end − begin).
struct LogitsShard {
  const float* z = nullptr;
  int64_t begin = 0, end = 0, V = 0;
};

// tp: the ranks holding the other shards (null or size 1: the shard is the
// whole row). Collective over tp; every rank returns the same token, or every
// rank throws Error when a logit of the row is NaN or infinite.
Sampled sample_token(const LogitsShard& row, Group* tp, const SamplingOptions& o, int64_t prompt_index,
                     int64_t position);

// The whole row in one process.
inline Sampled sample_token(const float* logits, int64_t V, const SamplingOptions& o, int64_t prompt_index,
                            int64_t position) {
  return sample_token(LogitsShard{logits, 0, V, V}, nullptr, o, prompt_index, position);
}

}  // namespace mt

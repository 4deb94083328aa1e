// The model's forward for generation, one step at a time against a KV cache:
// each step takes, for some sequences of the batch, their next n tokens
// (a prompt chunk, or the one token just sampled), appends their keys and
// values to the cache and returns logits. The rows of all sequences go
// through each GEMM together; attention runs per sequence, its queries at
// positions [len, len + n) against the cached keys [0, len + n).
//
// The same kernels as Llama::forward (ops/), on the weights of a one-process
// model (no tensor or pipeline parallelism: docs/MODEL.md says what is not
// built yet). RoPE: keys are cached after rotation, except under dynamic
// scaling, whose frequencies depend on the sequence length L: there keys are
// cached before rotation and all L are rotated with L's frequencies at each
// step, as a full forward over the L tokens rotates them (docs/MODEL.md says
// what still differs).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "infer/kv_cache.h"
#include "model/llama.h"

namespace mt {

struct DecodeRows {
  int64_t seq = 0;  // the sequence's index in the cache's batch
  const int32_t* ids = nullptr;
  int64_t n = 0;  // tokens, at positions [cache.length(seq), + n)
};

class Decoder {
 public:
  // ConfigError unless the model is whole on this process (no tp, one stage)
  // and the cache's layers, kv heads and head_dim are the model's.
  Decoder(const Llama& model, KvCache& cache);

  // logits: [entries, V], each entry's last token; with all_logits
  // [Σ n, V], every token's. Advances each sequence's cache length by n.
  void step(std::span<const DecodeRows> entries, float* logits, bool all_logits = false);

 private:
  void layer(int64_t l, std::span<const DecodeRows> entries);
  void attend(int64_t l, const DecodeRows& e, int64_t r0);
  const RopeTable& rope_for(int64_t seq_len);

  const Llama& model_;
  KvCache& cache_;
  ModelConfig cfg_;
  RopeScaling scaling_;
  bool rotate_at_attention_ = false;  // dynamic scaling: keys cached before rotation
  RopeTable rope_;                    // frequencies independent of the length (all but dynamic)
  RopeTable rope_len_;                // dynamic: those of the current entry's length
  int64_t M_ = 0;                     // rows of the current step
  std::vector<float> x_, ln_, rstd_, qkv_, att_, mid_, gu_, h_, lse_, kbuf_, vbuf_, krot_;
  std::vector<int32_t> pos_, kpos_;
};

}  // namespace mt

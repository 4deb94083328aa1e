// Generation for a batch of prompts: prefill (whole, or prefill_chunk tokens
// at a time against the growing cache), then one token per step for every
// sequence still running, until EOS or max_new_tokens (docs/MODEL.md,
// "Generation").
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "infer/kv_cache.h"
#include "infer/sampling.h"
#include "model/llama.h"

namespace mt {

struct GenerateOptions {
  int64_t max_new_tokens = 64;
  SamplingOptions sampling;
  int64_t prefill_chunk = 0;  // 0: the whole prompt in one step
  int32_t eos_id = -1;        // −1: no EOS stop
  KvDtype kv_dtype = KvDtype::f32;
};

// ConfigError naming the option and the rule (the sampling options, then
// --max-new-tokens and --prefill-chunk); generate() checks them too, and
// `meshtrain generate` first, before it prints anything.
void check_generate_options(const GenerateOptions& opts);

enum class StopReason { eos, length };
const char* stop_name(StopReason r);

struct Generation {
  std::vector<int32_t> tokens;   // the continuation, without the EOS that ended it
  std::vector<double> logprobs;  // one per token (sampling.h)
  StopReason stop = StopReason::length;
};

// This rank's cache: kv_cache_bytes = 2 · layers · slots · kv_heads · head_dim ·
// element size · batch (kv_cache.h; generation_kv_bytes); slots = capacity
// without cp. kv_cache_tracked: what the cache holds of MemKind::kv_cache.
struct GenerateStats {
  int64_t kv_cache_bytes = 0, capacity = 0;
  int64_t kv_cache_tracked = 0;
  int64_t layers = 0, slots = 0, kv_heads = 0, batch = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_s = 0, decode_s = 0;
  // Under cp: the prefill steps' calls on the cp axis, from the comm ledger
  // (the ring's point-to-point sends, and all-gathers).
  int64_t cp = 1, prefill_cp_sends = 0, prefill_cp_gathers = 0;
};

// The KV cache positions a batch needs: the longest prompt plus
// max_new_tokens − 1 (the last token is sampled, never fed back). ConfigError
// when a prompt is empty or this exceeds the model's max_seq_len (naming the
// prompt, numbered from first_index, and the numbers).
int64_t generation_capacity(const ModelConfig& cfg, const std::vector<std::vector<int32_t>>& prompts,
                            int64_t first_index, int64_t max_new_tokens);

// The memory model of generation (docs/PARALLELISM.md "Memory per rank"): the
// bytes of the KV cache of a rank holding `layers` decoder layers (its
// pipeline stage's), its tp share of the kv heads, and 1/cp of the `capacity`
// positions (rounded up) of `batch` sequences, in `dtype` (int8 with its scales).
int64_t generation_kv_bytes(const ModelConfig& cfg, TpRank tp, int64_t layers, int64_t batch,
                            int64_t capacity, KvDtype dtype, int cp = 1);

// The groups a rank generates with besides the model's own tp group (null or
// of size 1: none). pp: the pipeline's stages in rank order, the model being
// this rank's stage; each step's hidden state goes stage to stage and the
// chosen tokens come back from the last stage by broadcast, one prompt batch
// at a time (no batches in flight together). cp: the ranks sharing the KV cache
// by position (decoder.h), and cp_impl the prefill's attention over them
// (decoder.h: ring, or all-gather).
struct GenerateLayout {
  Group* pp = nullptr;
  Group* cp = nullptr;
  cp::CpImpl cp_impl = cp::CpImpl::ring;
};

// ConfigError when a prompt is empty or a prompt plus max_new_tokens − 1
// positions exceed the model's max_seq_len (naming the prompt and the numbers).
// prompts[i] is sampled as prompt number first_index + i. on_token(i, token) is
// called as each token is chosen (for streaming); it may be empty. Under a
// layout every rank of the model's tp, pp and cp groups calls this with the
// same prompts, and every one returns the same generations.
std::vector<Generation> generate(Llama& model, const std::vector<std::vector<int32_t>>& prompts,
                                 int64_t first_index, const GenerateOptions& opts, GenerateStats* stats,
                                 const std::function<void(int64_t, int32_t)>& on_token = {},
                                 const GenerateLayout& layout = {});

}  // namespace mt

#include "infer/generate.h"

#include <algorithm>

#include "core/error.h"
#include "core/timer.h"
#include "infer/decoder.h"

namespace mt {

const char* stop_name(StopReason r) {
  return r == StopReason::eos ? "eos" : "length";
}

int64_t generation_capacity(const ModelConfig& cfg, const std::vector<std::vector<int32_t>>& prompts,
                            int64_t first_index, int64_t max_new) {
  int64_t cap = 1;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t P = static_cast<int64_t>(prompts[i].size());
    const int64_t index = first_index + static_cast<int64_t>(i);
    MT_REQUIRE(P > 0, ConfigError, "prompt ", index, " is empty: generation needs at least one token");
    const int64_t need = P + std::max<int64_t>(max_new - 1, 0);
    MT_REQUIRE(need <= cfg.max_seq_len, ConfigError, "prompt ", index, " has ", P,
               " tokens; with --max-new-tokens ", max_new, " the KV cache needs ", need,
               " positions but the model's max_seq_len is ", cfg.max_seq_len);
    cap = std::max(cap, need);
  }
  return cap;
}

std::vector<Generation> generate(const Llama& model, const std::vector<std::vector<int32_t>>& prompts,
                                 int64_t first_index, const GenerateOptions& opts, GenerateStats* stats,
                                 const std::function<void(int64_t, int32_t)>& on_token) {
  check_sampling(opts.sampling);
  MT_REQUIRE(opts.max_new_tokens >= 0, ConfigError, "--max-new-tokens (", opts.max_new_tokens,
             ") must not be negative");
  MT_REQUIRE(opts.prefill_chunk >= 0, ConfigError, "--prefill-chunk (", opts.prefill_chunk,
             ") must be 0 (whole prompt) or positive");
  const ModelConfig& cfg = model.config();
  const int64_t B = static_cast<int64_t>(prompts.size()), V = cfg.vocab_size;
  const int64_t cap = generation_capacity(cfg, prompts, first_index, opts.max_new_tokens);
  std::vector<Generation> out(static_cast<size_t>(B));
  GenerateStats st;
  if (B == 0 || opts.max_new_tokens == 0) {
    if (stats != nullptr) *stats = st;
    return out;
  }
  KvCache cache(cfg.n_layers, B, cap, cfg.n_kv_heads, cfg.head_dim(), opts.kv_dtype);
  st.kv_cache_bytes = cache.bytes();
  st.capacity = cap;
  Decoder dec(model, cache);
  std::vector<float> logits(static_cast<size_t>(B * V));
  std::vector<bool> running(static_cast<size_t>(B), true);
  std::vector<int32_t> last(static_cast<size_t>(B));
  // Choose sequence b's next token from its logits row; stop it at EOS or the length.
  auto choose = [&](int64_t b, const float* z) {
    Generation& g = out[static_cast<size_t>(b)];
    const int64_t position = cache.length(b);  // where the new token sits
    const Sampled s = sample_token(z, V, opts.sampling, first_index + b, position);
    if (s.token == opts.eos_id) {
      g.stop = StopReason::eos;
      running[static_cast<size_t>(b)] = false;
      return;
    }
    g.tokens.push_back(s.token);
    g.logprobs.push_back(s.logprob);
    last[static_cast<size_t>(b)] = s.token;
    if (on_token) on_token(first_index + b, s.token);
    if (static_cast<int64_t>(g.tokens.size()) == opts.max_new_tokens) running[static_cast<size_t>(b)] = false;
  };
  Timer prefill_timer;
  const int64_t chunk = opts.prefill_chunk > 0 ? opts.prefill_chunk : cap;
  for (bool more = true; more;) {  // prefill: a chunk of every unfinished prompt per step
    std::vector<DecodeRows> rows;
    for (int64_t b = 0; b < B; ++b) {
      const auto& p = prompts[static_cast<size_t>(b)];
      const int64_t done = cache.length(b), P = static_cast<int64_t>(p.size());
      if (done < P) rows.push_back({b, p.data() + done, std::min(chunk, P - done)});
    }
    more = !rows.empty();
    if (!more) break;
    dec.step(rows, logits.data());
    for (size_t i = 0; i < rows.size(); ++i) {
      st.prefill_tokens += rows[i].n;
      if (cache.length(rows[i].seq) == static_cast<int64_t>(prompts[static_cast<size_t>(rows[i].seq)].size()))
        choose(rows[i].seq, logits.data() + static_cast<int64_t>(i) * V);
    }
  }
  st.prefill_s = prefill_timer.seconds();
  Timer decode_timer;
  for (;;) {  // decode: the last token of every running sequence, one step each
    std::vector<DecodeRows> rows;
    for (int64_t b = 0; b < B; ++b)
      if (running[static_cast<size_t>(b)]) rows.push_back({b, &last[static_cast<size_t>(b)], 1});
    if (rows.empty()) break;
    dec.step(rows, logits.data());
    st.decode_tokens += static_cast<int64_t>(rows.size());
    for (size_t i = 0; i < rows.size(); ++i)
      choose(rows[i].seq, logits.data() + static_cast<int64_t>(i) * V);
  }
  st.decode_s = decode_timer.seconds();
  if (stats != nullptr) *stats = st;
  return out;
}

}  // namespace mt

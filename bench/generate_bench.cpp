// Decode tokens/s with the KV cache (src/infer) against recomputing the whole
// prefix for every new token (the model's full forward), greedy, on a random
// model: prompt P tokens, N new tokens (docs/BENCHMARKS.md, "Generation").
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <vector>

#include "core/threads.h"
#include "core/timer.h"
#include "infer/generate.h"
#include "model/llama.h"

int main(int argc, char** argv) {
  CLI::App app{"KV-cache decode against prefix recomputation"};
  int64_t prompt = 256, new_tokens = 256, d_model = 256, layers = 4, vocab = 4096, threads = 0;
  app.add_option("--prompt", prompt, "prompt tokens")->capture_default_str();
  app.add_option("--new", new_tokens, "generated tokens")->capture_default_str();
  app.add_option("--d-model", d_model)->capture_default_str();
  app.add_option("--layers", layers)->capture_default_str();
  app.add_option("--vocab", vocab)->capture_default_str();
  app.add_option("--threads", threads, "0: all cores")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  mt::set_num_threads(threads > 0 ? static_cast<int>(threads) : mt::hardware_threads());
  mt::ModelConfig cfg;
  cfg.vocab_size = vocab;
  cfg.d_model = d_model;
  cfg.n_layers = layers;
  cfg.n_heads = d_model / 64;
  cfg.n_kv_heads = std::max<int64_t>(1, cfg.n_heads / 2);
  cfg.ffn_hidden = d_model * 8 / 3 / 16 * 16;
  cfg.max_seq_len = std::max<int64_t>(512, prompt + new_tokens);
  mt::ModelOptions mo;
  mo.max_seq = prompt + new_tokens;
  mt::Llama model(cfg, mo);
  model.init(1);
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < prompt; ++i)
    ids.push_back(static_cast<int32_t>((i * 7919 + 13) % vocab));
  mt::GenerateOptions o;
  o.max_new_tokens = new_tokens;
  mt::GenerateStats st;
  const auto cached = mt::generate(model, {ids}, 0, o, &st);
  // Recomputation: a full forward over the whole sequence for each new token.
  std::vector<int32_t> seq = ids;
  mt::Timer t;
  for (int64_t i = 0; i < new_tokens; ++i) {
    const int64_t T = static_cast<int64_t>(seq.size());
    model.forward(seq.data(), nullptr, 1, T);
    const float* last = model.logits() + (T - 1) * vocab;
    seq.push_back(static_cast<int32_t>(std::max_element(last, last + vocab) - last));
  }
  const double recompute_s = t.seconds();
  // The training forward (no targets) over the prompt: the prefill's reference.
  t.reset();
  constexpr int kReps = 5;
  for (int r = 0; r < kReps; ++r)
    model.forward(ids.data(), nullptr, 1, prompt);
  const double forward_rate = static_cast<double>(kReps * prompt) / t.seconds();
  const bool same = std::equal(cached[0].tokens.begin(), cached[0].tokens.end(), seq.begin() + prompt);
  std::printf(
      "model d_model %lld, layers %lld, heads %lld/%lld kv, vocab %lld; prompt %lld, new %lld, threads %d\n",
      static_cast<long long>(d_model), static_cast<long long>(layers), static_cast<long long>(cfg.n_heads),
      static_cast<long long>(cfg.n_kv_heads), static_cast<long long>(vocab), static_cast<long long>(prompt),
      static_cast<long long>(new_tokens), mt::num_threads());
  std::printf("prefill (cache)        %8.1f tok/s; training forward on the prompt %.1f tok/s\n",
              static_cast<double>(st.prefill_tokens) / st.prefill_s, forward_rate);
  std::printf("decode steps alone     %8.1f tok/s\n", static_cast<double>(st.decode_tokens) / st.decode_s);
  const double cache_rate = static_cast<double>(new_tokens) / (st.prefill_s + st.decode_s);
  const double re_rate = static_cast<double>(new_tokens) / recompute_s;
  std::printf("decode with KV cache   %8.1f tok/s (prefill + decode)\n", cache_rate);
  std::printf("recompute prefix       %8.1f tok/s\n", re_rate);
  std::printf("ratio                  %8.2fx; same greedy tokens: %s\n", cache_rate / re_rate,
              same ? "yes" : "NO");
  return same ? 0 : 1;
}

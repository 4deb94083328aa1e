// `meshtrain generate`: prompts in, continuations out (stdout), timings and
// the KV cache size on stderr. One process for now (docs/MODEL.md, "Generation").
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "comm/runtime.h"
#include "core/error.h"
#include "core/threads.h"
#include "data/tokenizer.h"
#include "infer/generate.h"
#include "train/memory_estimate.h"
#include "train/model_io.h"

namespace mt {
namespace {

// Refuses, by name, what this command does not do yet; every rank says so.
void check_one_process(const GenerateArgs& a, int world_size) {
  for (const auto& [flag, v] : {std::pair{"--dp", a.dp}, {"--tp", a.tp}, {"--pp", a.pp}, {"--cp", a.cp}}) {
    MT_REQUIRE(!v || *v == 1, ConfigError, flag, " ", v.value_or(1),
               ": generation runs in one process for now (multi-rank layouts are not built yet)");
  }
  MT_REQUIRE(world_size == 1, ConfigError, "generate runs in one process for now but mpirun started ",
             world_size, " ranks (multi-rank generation is not built yet)");
  MT_REQUIRE(a.output == "text" || a.output == "jsonl", ConfigError, "--output '", a.output,
             "' must be text or jsonl");
  MT_REQUIRE(a.batch_size >= 1, ConfigError, "--batch-size (", a.batch_size, ") must be at least 1");
}

// check_one_process's refusal, printed by each rank before the runtime's
// collective shutdown, so that no rank exits (and has mpirun end the others)
// before every message is out.
bool refused(const GenerateArgs& a, int world_size) {
  try {
    check_one_process(a, world_size);
    return false;
  } catch (const Error& e) {
    std::fprintf(stderr, "meshtrain: error: %s\n", e.what());
    std::fflush(stderr);
    return true;
  }
}

std::vector<std::string> read_prompts(const GenerateArgs& a) {
  std::vector<std::string> prompts = a.prompts;
  if (!a.prompts_file.empty()) {
    std::ifstream in(a.prompts_file);
    MT_REQUIRE(in.good(), IoError, "cannot open --prompts file '", a.prompts_file, "'");
    for (std::string line; std::getline(in, line);)
      prompts.push_back(line);
  }
  MT_REQUIRE(!prompts.empty(), ConfigError, "generate needs a prompt: --prompt TEXT or --prompts FILE");
  return prompts;
}

// The continuation's text as it reads after the prompt: sentencepiece drops
// the leading space of a sequence's first piece, so the continuation is
// decoded together with the prompt and the prompt's own text cut off.
std::string continuation_text(const Tokenizer& tok, std::vector<int32_t> prompt,
                              const std::vector<int32_t>& tokens) {
  const std::string before = tok.decode(prompt);
  prompt.insert(prompt.end(), tokens.begin(), tokens.end());
  const std::string all = tok.decode(prompt);
  return all.compare(0, before.size(), before) == 0 ? all.substr(before.size()) : tok.decode(tokens);
}

void print_jsonl(const std::vector<std::string>& text, const std::vector<std::vector<int32_t>>& ids,
                 const std::vector<Generation>& gens, int64_t first, const Tokenizer& tok, bool logprobs) {
  for (size_t i = 0; i < gens.size(); ++i) {
    const Generation& g = gens[i];
    nlohmann::ordered_json j = {
        {"index", first + static_cast<int64_t>(i)},
        {"prompt", text[static_cast<size_t>(first) + i]},
        {"text", continuation_text(tok, ids[static_cast<size_t>(first) + i], g.tokens)},
        {"tokens", g.tokens},
        {"stop", stop_name(g.stop)}};
    if (logprobs) j["logprobs"] = g.logprobs;
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
}

}  // namespace

int run_generate_command(const GenerateArgs& a) {
  CommRuntime runtime(nullptr, nullptr);
  if (refused(a, runtime.world().size())) return 1;
  set_num_threads(a.threads > 0 ? static_cast<int>(a.threads) : hardware_threads());
  const Tokenizer tok = Tokenizer::load(a.tokenizer);
  const ModelConfig cfg = read_model_config(a.model);
  MT_REQUIRE(!cfg.moe(), ConfigError, a.model, " is a mixture of experts (", cfg.n_experts,
             " experts): the cached decoder (src/infer) runs dense models only so far");
  MT_REQUIRE(tok.vocab_size() == cfg.vocab_size, ConfigError, "the tokenizer ", a.tokenizer, " has ",
             tok.vocab_size(), " tokens but the model ", a.model, " has a vocabulary of ", cfg.vocab_size,
             ": they were not trained together");
  GenerateOptions o;
  o.max_new_tokens = a.max_new_tokens;
  o.sampling = {a.temperature, a.top_k, a.top_p, static_cast<uint64_t>(a.seed)};
  o.prefill_chunk = a.prefill_chunk;
  o.eos_id = tok.eos_id();
  o.kv_dtype = parse_kv_dtype(a.kv_cache);
  check_sampling(o.sampling);
  const std::vector<std::string> text = read_prompts(a);
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& t : text)
    ids.push_back(tok.encode(t));
  require_fits(estimate_eval_memory(cfg, 1, 1), 1, available_memory_bytes());
  ModelOptions mo;  // the decoder reads the weights; the model's own buffers stay minimal
  mo.max_batch = 1;
  mo.max_seq = 1;
  Llama model(cfg, mo);
  load_model_dir(a.model, model);
  const bool stream = a.output == "text" && text.size() == 1;
  std::vector<int32_t> streamed = ids[0];  // the prompt, then each new token
  std::string shown = tok.decode(streamed);
  auto on_token = [&](int64_t, int32_t token) {  // print what the new token adds to the decoded text
    streamed.push_back(token);
    const std::string now = tok.decode(streamed);
    if (now.compare(0, shown.size(), shown) != 0) return;  // a multi-byte character is not complete yet
    std::fputs(now.substr(shown.size()).c_str(), stdout);
    std::fflush(stdout);
    shown = now;
  };
  for (size_t first = 0; first < ids.size(); first += static_cast<size_t>(a.batch_size)) {
    const size_t end = std::min(ids.size(), first + static_cast<size_t>(a.batch_size));
    const std::vector<std::vector<int32_t>> batch(ids.begin() + static_cast<std::ptrdiff_t>(first),
                                                  ids.begin() + static_cast<std::ptrdiff_t>(end));
    const int64_t cap = generation_capacity(cfg, batch, static_cast<int64_t>(first), o.max_new_tokens);
    const int64_t kv_bytes = KvCache::bytes_for(cfg.n_layers, static_cast<int64_t>(batch.size()), cap,
                                                cfg.n_kv_heads, cfg.head_dim(), o.kv_dtype);
    MT_REQUIRE(kv_bytes <= available_memory_bytes(), ConfigError, "the KV cache of prompts ", first, "..",
               end - 1, " needs ", kv_bytes, " bytes but ", available_memory_bytes(),
               " are available: lower --batch-size or --max-new-tokens, or use --kv-cache int8");
    if (stream) std::fputs(text[0].c_str(), stdout);
    GenerateStats st;
    const std::vector<Generation> gens = generate(
        model, batch, static_cast<int64_t>(first), o, &st,
        stream ? std::function<void(int64_t, int32_t)>(on_token) : std::function<void(int64_t, int32_t)>());
    if (stream) {
      const std::string all = tok.decode(streamed);
      std::printf("%s\n", all.substr(std::min(shown.size(), all.size())).c_str());
    } else if (a.output == "text") {
      for (size_t i = 0; i < gens.size(); ++i)
        std::printf("%s%s\n", text[first + i].c_str(),
                    continuation_text(tok, ids[first + i], gens[i].tokens).c_str());
    } else {
      print_jsonl(text, ids, gens, static_cast<int64_t>(first), tok, a.logprobs);
    }
    std::fprintf(stderr,
                 "generate: prompts %zu..%zu: kv cache %s %lld bytes (capacity %lld tokens x %zu sequences); "
                 "prefill %lld tokens %.3f s (%.1f tok/s); decode %lld tokens %.3f s (%.1f tok/s)\n",
                 first, end - 1, kv_dtype_name(o.kv_dtype), static_cast<long long>(st.kv_cache_bytes),
                 static_cast<long long>(st.capacity), end - first, static_cast<long long>(st.prefill_tokens),
                 st.prefill_s, st.prefill_s > 0 ? static_cast<double>(st.prefill_tokens) / st.prefill_s : 0.0,
                 static_cast<long long>(st.decode_tokens), st.decode_s,
                 st.decode_s > 0 ? static_cast<double>(st.decode_tokens) / st.decode_s : 0.0);
  }
  return 0;
}

}  // namespace mt

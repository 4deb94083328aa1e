// The bound of tests/dist/generate_layouts.sh on the printed log-probabilities:
// the float64 log-probabilities of the tokens a one-process `meshtrain
// generate --output jsonl --logprobs` chose, from the double model of
// llama_double.h on the saved weights (the full forward of prompt + tokens),
// and the layouts' bound derived from the one-process run's distance d from
// them, as test_generate.cpp derives it for batched decoding:
// layout_tol(d / scale, K) · scale = 10 · max(d, K·u·scale), scale the largest
// |log-probability|, K = max(d_model, ffn_hidden, the longest sequence) (the
// longest sum a logit is made of: docs/MODEL.md "Test bounds").
//
// usage: generate_reference MODEL_DIR TOKENIZER JSONL...
//   Prints one line "... bound B"; B is its last word. Exit 1 when the double
//   model is not this model (d ≥ 1e-3, against ~1e-6 of rounding) or when an
//   injected bug would move a log-probability by no more than 100 bounds: the
//   log-sum-exp over the first half of the vocabulary (a vocab-parallel sum
//   missing a rank), or the logits divided by 0.9 (the sampling temperature
//   applied to the reported probability).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bounds.h"
#include "data/tokenizer.h"
#include "model/llama.h"
#include "model/llama_double.h"
#include "train/model_io.h"

namespace {

// log softmax(z / temperature) over the first `vocab` columns, at `token`.
double log_prob(const double* z, int64_t vocab, int32_t token, double temperature) {
  double mx = z[0] / temperature, s = 0;
  for (int64_t v = 0; v < vocab; ++v)
    mx = std::max(mx, z[v] / temperature);
  for (int64_t v = 0; v < vocab; ++v)
    s += std::exp(z[v] / temperature - mx);
  return z[token] / temperature - mx - std::log(s);
}

struct Distances {
  double d = 0, scale = 0, half_vocab = 0, temperature = 0;
  int64_t longest = 0, tokens = 0;
};

void measure(const mt::Llama& m, const mt::Tokenizer& tok, const nlohmann::json& line, Distances& out) {
  std::vector<int32_t> seq = tok.encode(line["prompt"].get<std::string>());
  const auto P = static_cast<int64_t>(seq.size());
  const std::vector<int32_t> gen = line["tokens"].get<std::vector<int32_t>>();
  const std::vector<double> lp32 = line["logprobs"].get<std::vector<double>>();
  if (gen.empty()) return;
  seq.insert(seq.end(), gen.begin(), gen.end() - 1);
  const auto T = static_cast<int64_t>(seq.size());
  const int64_t V = m.config().vocab_size;
  const std::vector<double> logits = mt::testing::llama_logits_f64(m, seq.data(), 1, T);
  for (size_t j = 0; j < gen.size(); ++j) {
    const double* z = logits.data() + (P + static_cast<int64_t>(j) - 1) * V;
    const double lp = log_prob(z, V, gen[j], 1.0);
    out.d = std::max(out.d, std::abs(lp32[j] - lp));
    out.scale = std::max(out.scale, std::abs(lp));
    if (gen[j] < V / 2)
      out.half_vocab = std::max(out.half_vocab, std::abs(log_prob(z, V / 2, gen[j], 1.0) - lp));
    out.temperature = std::max(out.temperature, std::abs(log_prob(z, V, gen[j], 0.9) - lp));
  }
  out.longest = std::max(out.longest, T);
  out.tokens += static_cast<int64_t>(gen.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: generate_reference MODEL_DIR TOKENIZER JSONL...\n");
    return 2;
  }
  const mt::ModelConfig cfg = mt::read_model_config(argv[1]);
  mt::ModelOptions mo;
  mo.max_batch = 1;
  mo.max_seq = cfg.max_seq_len;
  mt::Llama model(cfg, mo);
  mt::load_model_dir(argv[1], model);
  const mt::Tokenizer tok = mt::Tokenizer::load(argv[2]);
  Distances dist;
  for (int i = 3; i < argc; ++i) {
    std::ifstream f(argv[i]);
    for (std::string s; std::getline(f, s);)
      if (!s.empty()) measure(model, tok, nlohmann::json::parse(s), dist);
  }
  const int64_t K = std::max({cfg.d_model, cfg.ffn_hidden, dist.longest});
  const double bound = mt::testing::layout_tol(dist.d / dist.scale, K) * dist.scale;
  const double moved[2] = {dist.half_vocab / bound, dist.temperature / bound};
  std::printf(
      "%lld log-probabilities: one process %.3e from float64 (scale %.3g); the half-vocabulary "
      "sum moves them %.3g bounds, temperature 0.9 %.3g; bound %.6e\n",
      static_cast<long long>(dist.tokens), dist.d, dist.scale, moved[0], moved[1], bound);
  if (dist.tokens == 0 || dist.d >= 1e-3) {
    std::fprintf(stderr, "generate_reference: the double model is not this model (d %.3e)\n", dist.d);
    return 1;
  }
  return std::min(moved[0], moved[1]) > 100.0 ? 0 : 1;
}

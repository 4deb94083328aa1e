// Cached decoding against the model's full forward (src/model), prefix by
// prefix, under every RoPE scaling; chunked prefill against whole prefill.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "bounds.h"
#include "infer/decoder.h"
#include "infer_util.h"
#include "model/llama_double.h"

namespace mt {
namespace {

using testing::max_abs_diff;

// Logits of the last token of a full forward over tokens[0, t).
std::vector<float> full_forward_last(Llama& full, const std::vector<int32_t>& tokens, int64_t t) {
  full.forward(tokens.data(), nullptr, 1, t);
  const int64_t V = full.config().vocab_size;
  const float* last = full.logits() + (t - 1) * V;
  return {last, last + V};
}

// The bound of two fp32 runs of the model that sum in other orders (cached or
// chunked against full): 10× the full forward's own distance from the double
// forward of the same tokens (llama_double.h, testing::layout_tol), floor a sum
// of max(d_model, ffn_hidden, t) terms, over the logits' scale.
double logits_tol(const Llama& m, const std::vector<int32_t>& tok, int64_t t, const float* full,
                  int64_t rows) {
  const int64_t V = m.config().vocab_size;
  const std::vector<double> f64 = testing::llama_logits_f64(m, tok.data(), 1, t);
  const double* last = f64.data() + (t - rows) * V;
  double scale = 0;
  for (int64_t i = 0; i < rows * V; ++i)
    scale = std::max(scale, std::abs(last[i]));
  const double d = testing::max_abs_diff_f64(full, last, rows * V) / scale;
  // Rounding is ~1e-6 here, a different model O(1): guards the bound against
  // a double forward that is not this model.
  EXPECT_LT(d, 1e-3) << "the double forward is not this model";
  testing::log_ratio(d, "full vs double (relative)");
  return testing::layout_tol(d, std::max({m.config().d_model, m.config().ffn_hidden, t})) * scale;
}

// For every prefix length t, the cached step's logits equal the full forward's
// within logits_tol; returns the worst difference.
double cached_vs_full(const ModelConfig& cfg, int64_t T, bool exact = true) {
  ModelOptions mo;
  mo.max_seq = T;
  Llama full(cfg, mo);
  full.init(3);
  const std::vector<int32_t> tok = testing::tokens(T, 1);
  KvCache cache(cfg.n_layers, 1, T, cfg.n_kv_heads, cfg.head_dim());
  Decoder dec(full, cache);
  std::vector<float> logits(static_cast<size_t>(cfg.vocab_size));
  double worst = 0, spread = 0;
  std::vector<float> previous;
  for (int64_t t = 1; t <= T; ++t) {
    const DecodeRows row{0, tok.data() + t - 1, 1};
    dec.step({&row, 1}, logits.data());
    const std::vector<float> want = full_forward_last(full, tok, t);
    const double d = max_abs_diff(logits.data(), want.data(), cfg.vocab_size);
    if (exact) {
      EXPECT_TRUE(testing::below(d, logits_tol(full, tok, t, want.data(), 1), "cached vs full"))
          << cfg.rope_scaling << ", prefix " << t;
    }
    worst = std::max(worst, d);
    if (!previous.empty())
      spread = std::max(spread, max_abs_diff(previous.data(), want.data(), cfg.vocab_size));
    previous = want;
  }
  EXPECT_GT(spread, 0.1) << "the logits must vary from prefix to prefix for the comparison to mean anything";
  return worst;
}

TEST(Decoder, CachedDecodingEqualsFullForwardForEveryPrefix) {
  for (const char* scaling :
       {"none", "linear,factor=4", "yarn,factor=4,original_max_position_embeddings=8",
        "llama3,factor=4,low_freq_factor=1,high_freq_factor=4,original_max_position_embeddings=8"}) {
    const double worst = cached_vs_full(testing::tiny_config(scaling), 24);
    std::printf("%-80s worst |cached - full| = %.3g\n", scaling, worst);
  }
}

// Dynamic scaling changes every frequency as the sequence grows. Keys are
// cached before rotation and rotated with the current length's frequencies,
// so layer 1 matches a full forward exactly at every length; deeper layers
// match while the length is ≤ L0 (original_max_position_embeddings), and past
// it differ, because earlier tokens' hidden states were computed when the
// sequence was shorter (docs/MODEL.md).
TEST(Decoder, DynamicScalingWithTheCache) {
  const std::string dyn = "dynamic,factor=4,original_max_position_embeddings=8";
  cached_vs_full(testing::tiny_config(dyn, 1), 24);  // past L0 = 8, exact
  cached_vs_full(testing::tiny_config(dyn, 2), 8);   // up to L0, exact
  // Past L0 with two layers: the documented difference, measured.
  const double past = cached_vs_full(testing::tiny_config(dyn, 2), 24, /*exact=*/false);
  std::printf("dynamic, 2 layers, 24 tokens (L0 = 8): worst |cached - full| = %.3g\n", past);
  EXPECT_GT(past, 1e-4);
}

TEST(Decoder, ChunkedPrefillEqualsWholePrefill) {
  const ModelConfig cfg = testing::tiny_config("yarn,factor=4,original_max_position_embeddings=8");
  Llama model(cfg, ModelOptions{});
  model.init(5);
  const std::vector<int32_t> tok = testing::tokens(20, 2);
  const int64_t V = cfg.vocab_size, P = 17;
  KvCache whole(cfg.n_layers, 1, 20, cfg.n_kv_heads, cfg.head_dim());
  KvCache chunked(cfg.n_layers, 1, 20, cfg.n_kv_heads, cfg.head_dim());
  Decoder a(model, whole), b(model, chunked);
  std::vector<float> la(static_cast<size_t>(P * V)), lb(static_cast<size_t>(P * V));
  const DecodeRows all{0, tok.data(), P};
  a.step({&all, 1}, la.data(), /*all_logits=*/true);
  for (int64_t at = 0; at < P; at += 5) {  // chunks of 5, 5, 5, 2
    const DecodeRows part{0, tok.data() + at, std::min<int64_t>(5, P - at)};
    b.step({&part, 1}, lb.data() + at * V, /*all_logits=*/true);
  }
  EXPECT_TRUE(testing::below(max_abs_diff(la.data(), lb.data(), P * V),
                             logits_tol(model, tok, P, la.data(), P), "chunked prefill"));
  for (int64_t t = P; t < 20; ++t) {  // and decoding after either
    const DecodeRows row{0, tok.data() + t, 1};
    a.step({&row, 1}, la.data());
    b.step({&row, 1}, lb.data());
    EXPECT_TRUE(testing::below(max_abs_diff(la.data(), lb.data(), V),
                               logits_tol(model, tok, t + 1, la.data(), 1), "decoding after chunks"))
        << "token " << t;
  }
}

// A mixture of experts decodes through the training layer (model/llama_decode.cpp):
// at every prefix the cached step picks the full forward's greedy token. (No
// double forward of a mixture of experts exists to bound the logits by, so the
// test holds the token, which a wrong router, expert or cache would change,
// and prints the logits' distance.)
TEST(Decoder, MixtureOfExpertsPicksTheFullForwardsToken) {
  ModelConfig cfg = testing::tiny_config();
  cfg.n_experts = 4;
  cfg.top_k = 2;
  cfg.expert_ffn_hidden = 16;
  const int64_t T = 20, V = cfg.vocab_size;
  ModelOptions mo;
  mo.max_seq = T;
  Llama full(cfg, mo);
  full.init(4);
  const std::vector<int32_t> tok = testing::tokens(T, 3);
  KvCache cache(cfg.n_layers, 1, T, cfg.n_kv_heads, cfg.head_dim());
  Decoder dec(full, cache);
  std::vector<float> logits(static_cast<size_t>(V));
  double worst = 0;
  std::vector<int64_t> picks;
  for (int64_t t = 1; t <= T; ++t) {
    const DecodeRows row{0, tok.data() + t - 1, 1};
    dec.step({&row, 1}, logits.data());
    const std::vector<float> want = full_forward_last(full, tok, t);
    worst = std::max(worst, max_abs_diff(logits.data(), want.data(), V));
    const auto pick = std::max_element(want.begin(), want.end()) - want.begin();
    EXPECT_EQ(std::max_element(logits.begin(), logits.end()) - logits.begin(), pick) << "prefix " << t;
    picks.push_back(pick);
  }
  std::sort(picks.begin(), picks.end());
  EXPECT_GT(std::unique(picks.begin(), picks.end()) - picks.begin(), 3)
      << "the tokens must vary to mean anything";
  std::printf("mixture of experts: worst |cached - full| = %.3g\n", worst);
}

// int8 keys and values (one scale per token and kv head): the logits move,
// by a measured amount, and the cache is about 4x smaller.
TEST(Decoder, Int8CacheLogitError) {
  const ModelConfig cfg = testing::tiny_config();
  Llama model(cfg, ModelOptions{});
  model.init(3);
  const std::vector<int32_t> tok = testing::tokens(24, 1);
  KvCache f32(cfg.n_layers, 1, 24, cfg.n_kv_heads, cfg.head_dim());
  KvCache q8(cfg.n_layers, 1, 24, cfg.n_kv_heads, cfg.head_dim(), KvDtype::int8);
  Decoder a(model, f32), b(model, q8);
  std::vector<float> la(64), lb(64);
  double worst = 0, scale = 0;
  for (int64_t t = 0; t < 24; ++t) {
    const DecodeRows row{0, tok.data() + t, 1};
    a.step({&row, 1}, la.data());
    b.step({&row, 1}, lb.data());
    worst = std::max(worst, max_abs_diff(la.data(), lb.data(), 64));
    for (float x : la)
      scale = std::max(scale, static_cast<double>(std::abs(x)));
  }
  std::printf("int8 KV cache: max |logit error| %.3g (max |logit| %.3g); bytes %lld vs %lld\n", worst, scale,
              static_cast<long long>(q8.bytes()), static_cast<long long>(f32.bytes()));
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, 0.05 * scale);
  EXPECT_EQ(q8.bytes(), 2 * 2 * 24 * 2 * (8 + 4));
  EXPECT_EQ(f32.bytes(), 2 * 2 * 24 * 2 * 8 * 4);
}

}  // namespace
}  // namespace mt

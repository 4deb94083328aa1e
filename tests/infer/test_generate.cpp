// Batched generation against one prompt at a time, reproducible sampling, the
// KV cache's size against its formula, and bad input.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bounds.h"
#include "core/error.h"
#include "infer/generate.h"
#include "infer_util.h"
#include "model/llama_double.h"

namespace mt {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "no error";
}

class Generate : public ::testing::Test {
 protected:
  Generate() : cfg_(testing::tiny_config()), model_(cfg_, ModelOptions{}) { model_.init(9); }
  ModelConfig cfg_;
  Llama model_;
  std::vector<std::vector<int32_t>> prompts_ = {testing::tokens(3, 1), testing::tokens(9, 2),
                                                testing::tokens(5, 3)};
};

TEST_F(Generate, BatchedEqualsOneAtATimeGreedyAndSampled) {
  for (const SamplingOptions s : {SamplingOptions{}, SamplingOptions{0.8, 10, 0.9, 7}}) {
    GenerateOptions o;
    o.max_new_tokens = 10;
    o.sampling = s;
    o.prefill_chunk = 4;
    const std::vector<Generation> batched = generate(model_, prompts_, 0, o, nullptr);
    for (size_t i = 0; i < prompts_.size(); ++i) {
      o.prefill_chunk = 0;  // and the whole prompt at once
      const std::vector<Generation> alone =
          generate(model_, {prompts_[i]}, static_cast<int64_t>(i), o, nullptr);
      EXPECT_EQ(batched[i].tokens, alone[0].tokens) << "prompt " << i << ", temperature " << s.temperature;
      ASSERT_EQ(batched[i].logprobs.size(), alone[0].logprobs.size());
      // Bound: 10× the alone run's own distance from the double model's
      // log-probabilities of the same tokens (llama_double.h,
      // testing::layout_tol), floor a sum of ffn_hidden terms, over their scale.
      std::vector<int32_t> seq = prompts_[i];
      seq.insert(seq.end(), alone[0].tokens.begin(), alone[0].tokens.end() - 1);
      const int64_t T = static_cast<int64_t>(seq.size()), V = cfg_.vocab_size;
      const std::vector<double> f64 = testing::llama_logits_f64(model_, seq.data(), 1, T);
      double d = 0, scale = 0, worst = 0;
      for (size_t j = 0; j < alone[0].logprobs.size(); ++j) {
        const double* z = f64.data() + (static_cast<int64_t>(prompts_[i].size() + j) - 1) * V;
        double mx = z[0], s_exp = 0;
        for (int64_t c = 0; c < V; ++c)
          mx = std::max(mx, z[c]);
        for (int64_t c = 0; c < V; ++c)
          s_exp += std::exp(z[c] - mx);
        const double lp = z[alone[0].tokens[j]] - mx - std::log(s_exp);
        d = std::max(d, std::abs(alone[0].logprobs[j] - lp));
        scale = std::max(scale, std::abs(lp));
        worst = std::max(worst, std::abs(batched[i].logprobs[j] - alone[0].logprobs[j]));
      }
      EXPECT_LT(d, 1e-3) << "the double forward is not this model";  // rounding ~1e-6, a different model O(1)
      EXPECT_TRUE(testing::below(worst, testing::layout_tol(d / scale, cfg_.ffn_hidden) * scale, "logprobs"))
          << "prompt " << i;
      EXPECT_EQ(batched[i].tokens.size(), 10u);
      EXPECT_EQ(batched[i].stop, StopReason::length);
    }
  }
}

TEST_F(Generate, SamplingIsKeyedBySeedPromptAndPosition) {
  GenerateOptions o;
  o.max_new_tokens = 12;
  o.sampling = {1.0, 0, 1.0, 1};
  const auto a = generate(model_, prompts_, 0, o, nullptr);
  const auto b = generate(model_, prompts_, 0, o, nullptr);
  o.sampling.seed = 2;
  const auto c = generate(model_, prompts_, 0, o, nullptr);
  const auto d = generate(model_, prompts_, 5, o, nullptr);  // other prompt numbers, other draws
  for (size_t i = 0; i < prompts_.size(); ++i)
    EXPECT_EQ(a[i].tokens, b[i].tokens);
  EXPECT_NE(a[1].tokens, c[1].tokens);
  EXPECT_NE(c[1].tokens, d[1].tokens);
}

TEST_F(Generate, StopsAtEos) {
  GenerateOptions o;
  o.max_new_tokens = 10;
  const auto free_run = generate(model_, {prompts_[1]}, 0, o, nullptr);
  o.eos_id = free_run[0].tokens[3];  // the 4th token, in this model's greedy continuation
  const auto stopped = generate(model_, {prompts_[1]}, 0, o, nullptr);
  EXPECT_EQ(stopped[0].stop, StopReason::eos);
  EXPECT_LE(stopped[0].tokens.size(), 3u);
}

TEST_F(Generate, KvCacheBytesAreTheAnalyticCount) {
  GenerateOptions o;
  o.max_new_tokens = 6;
  GenerateStats st;
  generate(model_, prompts_, 0, o, &st);
  const int64_t tokens = 9 + 6 - 1;  // the longest prompt and the new tokens but the last
  EXPECT_EQ(st.capacity, tokens);
  EXPECT_EQ(st.kv_cache_bytes, 2 * cfg_.n_layers * tokens * cfg_.n_kv_heads * cfg_.head_dim() * 4 * 3);
  EXPECT_EQ(st.kv_cache_tracked, st.kv_cache_bytes);  // what the allocator charged to kv_cache
  EXPECT_EQ(st.prefill_tokens, 3 + 9 + 5);
  EXPECT_EQ(st.decode_tokens, 3 * 5);
  // int8: one byte an element and a float scale per (token, kv head).
  o.kv_dtype = KvDtype::int8;
  generate(model_, prompts_, 0, o, &st);
  EXPECT_EQ(st.kv_cache_bytes, 2 * cfg_.n_layers * tokens * cfg_.n_kv_heads * (cfg_.head_dim() + 4) * 3);
  EXPECT_EQ(st.kv_cache_tracked, st.kv_cache_bytes);
  const MemStats mem = MemoryTracker::stats();  // the cache is freed when generate returns
  EXPECT_EQ(mem.current[static_cast<size_t>(MemKind::kv_cache)], 0);
  EXPECT_GE(mem.peak[static_cast<size_t>(MemKind::kv_cache)], st.kv_cache_bytes);
}

TEST_F(Generate, BadInputNamesTheProblem) {
  GenerateOptions o;
  o.max_new_tokens = 10;
  EXPECT_NE(
      error_of([&] { generate(model_, {testing::tokens(20, 1)}, 0, o, nullptr); })
          .find("prompt 0 has 20 tokens; with --max-new-tokens 10 the KV cache needs 29 positions but the "
                "model's max_seq_len is 24"),
      std::string::npos);
  EXPECT_NE(error_of([&] { generate(model_, {{}}, 0, o, nullptr); }).find("prompt 0 is empty"),
            std::string::npos);
  for (double p : {0.0, 1.5, -0.1}) {
    o.sampling.top_p = p;
    EXPECT_NE(error_of([&] { generate(model_, prompts_, 0, o, nullptr); }).find("--top-p"),
              std::string::npos);
  }
  o.sampling = {-1.0, 0, 1.0, 0};
  EXPECT_NE(error_of([&] { generate(model_, prompts_, 0, o, nullptr); }).find("--temperature (-1)"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_kv_dtype("fp8"); }).find("--kv-cache 'fp8' must be f32 or int8"),
            std::string::npos);
  EXPECT_NE(error_of([] {
              testing::tiny_config("ntk,factor=2").validate();
            }).find("unknown RoPE scaling type 'ntk'"),
            std::string::npos);
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// A cache sharded by position over 3 shards: each keeps positions p ≡ shard
// (mod 3) in slot p / 3, together every position once, and its bytes count
// ceil(capacity / 3) positions.
TEST(KvCacheShards, EachShardKeepsItsPositions) {
  const int64_t cap = 8, row = 2 * 4;  // 2 kv heads × head_dim 4
  std::vector<float> k(static_cast<size_t>(cap * row)), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = static_cast<float>(i);
    v[i] = -static_cast<float>(i);
  }
  int64_t kept = 0;
  for (int shard = 0; shard < 3; ++shard) {
    KvCache c(1, 1, cap, 2, 4, KvDtype::f32, 3, shard);
    EXPECT_EQ(c.slots(), 3);
    EXPECT_EQ(c.bytes(), 2 * 1 * 3 * 2 * 4 * 4);
    c.write(0, 0, 0, 5, k.data(), v.data(), row);  // positions 0..4, then 5..7
    c.write(0, 0, 5, 3, k.data() + 5 * row, v.data() + 5 * row, row);
    std::vector<float> scratch;
    const int64_t n = c.local_count(cap);
    EXPECT_EQ(n, (cap - shard + 2) / 3);
    const float* keys = c.keys(0, 0, cap, scratch);
    const float* values = c.values(0, 0, cap, scratch);
    for (int64_t j = 0; j < n; ++j) {
      const int64_t p = c.position_of(j);
      EXPECT_EQ(p % 3, shard);
      EXPECT_EQ(keys[j * row], k[static_cast<size_t>(p * row)]) << "shard " << shard << " slot " << j;
      EXPECT_EQ(values[j * row + row - 1], v[static_cast<size_t>(p * row + row - 1)]);
    }
    kept += n;
  }
  EXPECT_EQ(kept, cap);
}

}  // namespace
}  // namespace mt

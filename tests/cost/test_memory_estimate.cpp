// The memory estimate: overflow-checked sizes, hand-counted parameters and
// shards, and a refusal that names the estimate, the available memory and the
// largest part.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "config/config.h"
#include "core/error.h"
#include "cost/memory_estimate.h"

namespace mt {
namespace {

using ::testing::HasSubstr;

ModelConfig tiny() {
  ModelConfig m;
  m.vocab_size = 300;
  m.d_model = 32;
  m.n_layers = 2;
  m.n_heads = 4;
  m.n_kv_heads = 2;
  m.ffn_hidden = 48;
  return m;
}

// Config::validate's copy of c: the estimate reads the typed keys it parses.
Config valid(Config c) {
  c.validate();
  return c;
}

TEST(MemoryEstimate, ParameterCountByHand) {
  // Per layer: wqkv 32 x (32 + 2 x 16) = 2048, wo 32 x 32 = 1024, MLP 3 x 32 x 48
  // = 4608, two norms 64: 7744; two layers 15488; embedding and head 2 x 9600;
  // final norm 32.
  ModelConfig m = tiny();
  EXPECT_EQ(checked_param_count(m), 15488 + 19200 + 32);
  m.tie_embeddings = true;
  EXPECT_EQ(checked_param_count(m), 15488 + 9600 + 32);
}

TEST(MemoryEstimate, SizesThatOverflowSixtyFourBitsAreConfigErrors) {
  ModelConfig m = tiny();
  m.vocab_size = 1000000000000;
  m.d_model = 1000000000000;
  m.n_heads = 1;
  m.n_kv_heads = 1;
  try {
    checked_param_count(m);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("does not fit in 64 bits"));
  }
  EXPECT_THROW(checked_mul(INT64_MAX / 2, 3, "x"), ConfigError);
  EXPECT_THROW(checked_add(INT64_MAX, 1, "x"), ConfigError);
  EXPECT_EQ(checked_mul(3037000499, 3037000499, "x"), 9223372030926249001);
}

TEST(MemoryEstimate, ShardingDividesTheModelState) {
  Config one;
  one.model = tiny();
  one.parallel.dp = 4;
  one.train.microbatch_size = 2;  // batch_size 8 over dp 4
  Config z3 = one;
  z3.parallel.zero = 3;
  const MemoryEstimate a = estimate_training_memory(valid(one)), b = estimate_training_memory(valid(z3));
  EXPECT_EQ(a.parts[0].second, checked_param_count(tiny()) * 4);  // parameters, replicated
  // Every parameter's rows divide by 4, so the shard is a quarter of the
  // model; ZeRO-3 adds up to two gathered units, the largest being the final
  // norm and LM head: 32 + 300 x 32 = 9632 (cost/memory_model.h).
  EXPECT_EQ(b.parts[0].second, (checked_param_count(tiny()) / 4 + 2 * 9632) * 4);
  EXPECT_EQ(b.parts[2].second, checked_param_count(tiny()) / 4 * 8);  // AdamW m and v
}

TEST(MemoryEstimate, ExpertParallelHoldsItsShareOfTheExperts) {
  Config one;
  one.model = tiny();  // d_model 32, 2 layers
  one.model.n_experts = 4;
  one.model.top_k = 2;
  one.model.expert_ffn_hidden = 24;
  one.parallel.dp = 2;
  one.train.microbatch_size = 2;  // batch_size 8 over dp 2
  Config ep2 = one;
  ep2.parallel.ep = 2;
  // Each rank holds 2 of the 4 experts of each of the 2 layers: 2 x 2 x (3 x 32 x 24) = 9216 weights fewer.
  EXPECT_EQ(estimate_training_memory(valid(one)).parts[0].second -
                estimate_training_memory(valid(ep2)).parts[0].second,
            9216 * 4);
}

TEST(MemoryEstimate, ZeroShardsTheExpertsOverTheirReplicas) {
  Config c;
  c.model = tiny();  // d_model 32, 2 layers
  c.model.n_experts = 4;
  c.model.top_k = 2;
  c.model.expert_ffn_hidden = 24;
  c.parallel.dp = 4;
  c.parallel.ep = 2;
  c.parallel.zero = 3;
  c.train.microbatch_size = 2;  // batch_size 8 over dp 4
  // Each rank holds 2 x 2 experts of 3 x 32 x 24 = 9216 weights, sharded over
  // the 2 ranks holding the same experts (4608 each); the dense rest over dp 4.
  const int64_t dense = checked_param_count(c.model) - 2 * 4 * 3 * 32 * 24;
  const MemoryEstimate e = estimate_training_memory(valid(c));
  // Parameters and gradients add gathered units and one unit's full gradient
  // at a time, the largest unit being the final norm and LM head (9632).
  EXPECT_EQ(e.parts[0].second, (dense / 4 + 4608 + 2 * 9632) * 4);  // parameters
  EXPECT_EQ(e.parts[1].second, (dense / 4 + 4608 + 9632) * 4);      // gradients
  EXPECT_EQ(e.parts[2].second, (dense / 4 + 4608) * 8);             // AdamW m and v
  c.parallel.zero = 1;
  const MemoryEstimate z1 = estimate_training_memory(valid(c));
  EXPECT_EQ(z1.parts[0].second, (dense + 9216) * 4);  // parameters whole
  EXPECT_EQ(z1.parts[2].second, (dense / 4 + 4608) * 8);
}

TEST(MemoryEstimate, RefusalNamesEstimateAvailableAndLargestPart) {
  Config c;
  c.model = tiny();
  c.model.n_layers = 1000000000;
  c.train.recompute = "full";  // one layer's activations: the model state dominates
  const MemoryEstimate e = estimate_training_memory(valid(c));
  EXPECT_EQ(e.largest().first, "AdamW state");
  try {
    require_fits(e, 2, int64_t{8} << 30);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& err) {
    EXPECT_THAT(err.what(), HasSubstr("2 rank(s) x"));
    EXPECT_THAT(err.what(), HasSubstr("only 8 GiB is available"));
    EXPECT_THAT(err.what(), HasSubstr("the largest part is AdamW state"));
  }
  EXPECT_NO_THROW(require_fits(estimate_training_memory(valid(Config{})), 1, int64_t{64} << 30));
  EXPECT_NO_THROW(require_fits(e, 1, -1));  // unknown availability: nothing to check against
  EXPECT_GT(available_memory_bytes(), 0);
}

}  // namespace
}  // namespace mt

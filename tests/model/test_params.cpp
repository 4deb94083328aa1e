#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "model/params.h"

namespace mt {
namespace {

TEST(ParamTable, HuggingFaceNamesShapesAndFusedAdjacency) {
  ModelConfig c;
  c.vocab_size = 100;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  const ParamTable t = make_param_table(c);
  EXPECT_EQ(t.find("model.embed_tokens.weight").shape, (std::vector<int64_t>{100, 16}));
  EXPECT_EQ(t.find("model.layers.1.self_attn.q_proj.weight").shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(t.find("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(t.find("model.layers.1.self_attn.o_proj.weight").shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(t.find("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(t.find("lm_head.weight").shape, (std::vector<int64_t>{100, 16}));
  // q, k, v adjacent (one fused GEMM); gate, up adjacent.
  const auto& q = t.find("model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(t.find("model.layers.1.self_attn.k_proj.weight").offset, q.offset + q.numel);
  const auto& g = t.find("model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(t.find("model.layers.0.mlp.up_proj.weight").offset, g.offset + g.numel);
  // 2·V·C + L·(2C + C·(C + 2·KV·D) + C·C + 3·C·F) + C
  EXPECT_EQ(t.total, 2 * 100 * 16 + 2 * (2 * 16 + 16 * 32 + 16 * 16 + 3 * 16 * 24) + 16);
  EXPECT_FALSE(t.find("model.norm.weight").weight_decay);
  EXPECT_FALSE(t.find("model.embed_tokens.weight").weight_decay);
  EXPECT_TRUE(t.find("lm_head.weight").weight_decay);
  EXPECT_THROW(t.find("nope"), ConfigError);

  c.tie_embeddings = true;
  const ParamTable tied = make_param_table(c);
  EXPECT_EQ(tied.lm_head, tied.embed);
  EXPECT_EQ(tied.total, t.total - 100 * 16);
}

TEST(ParamInit, PureFunctionOfSeedNameIndex) {
  ModelConfig c;
  c.vocab_size = 50;
  c.d_model = 8;
  c.n_layers = 3;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.ffn_hidden = 12;
  const ParamTable t = make_param_table(c);
  std::vector<float> a(static_cast<size_t>(t.total)), b(a.size()), other(a.size());
  init_params(a.data(), t, c, 42);
  init_params(b.data(), t, c, 42);
  init_params(other.data(), t, c, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  const auto& norm = t.find("model.layers.2.input_layernorm.weight");
  for (int64_t i = 0; i < norm.numel; ++i)
    EXPECT_EQ(a[static_cast<size_t>(norm.offset + i)], 1.0f);
  // The documented rule: element i of a weight is init_std · N(seed, name, i),
  // and residual output projections are further scaled by 1/sqrt(2·n_layers).
  const auto& o = t.find("model.layers.1.self_attn.o_proj.weight");
  const auto& up = t.find("model.layers.1.mlp.up_proj.weight");
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_FLOAT_EQ(a[static_cast<size_t>(o.offset + i)],
                    static_cast<float>(0.02 / std::sqrt(6.0) * philox_normal(philox_key(42, o.name), i)));
    EXPECT_FLOAT_EQ(a[static_cast<size_t>(up.offset + i)],
                    static_cast<float>(0.02 * philox_normal(philox_key(42, up.name), i)));
  }
}

}  // namespace
}  // namespace mt

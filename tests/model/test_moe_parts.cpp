// The mixture of experts' parts: gradients against finite differences, the
// router's ties and weights, the dispatch plan and its capacity rule (hand
// derived), the aux-loss-free bias, the start-up refusals, config.json.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bounds.h"
#include "config/config.h"
#include "core/error.h"
#include "formats/safetensors.h"
#include "model/llama.h"
#include "ops/router.h"
#include "parallel/expert_parallel.h"
#include "cost/flops.h"
#include "cost/memory_estimate.h"
#include "train/model_io.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

ModelConfig small_moe() {
  ModelConfig c;
  c.vocab_size = 29;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.ffn_hidden = 12;
  c.max_seq_len = 8;
  c.init_std = 0.3;
  c.n_experts = 4;
  c.top_k = 2;
  c.expert_ffn_hidden = 6;
  c.router_aux_loss_coef = 0.5;  // large, so that a wrong aux gradient shows
  c.router_z_loss_coef = 0.05;
  return c;
}

// The training loss the backward differentiates: cross-entropy (a mean over
// the valid targets) + the router losses times their coefficients.
double total_loss(Llama& m, const std::vector<int32_t>& in, const std::vector<int32_t>& tg, int64_t B,
                  int64_t T) {
  const ModelConfig& c = m.config();
  const double ce = m.forward(in.data(), tg.data(), B, T) / static_cast<double>(B * T);
  return ce + c.router_aux_loss_coef * m.moe_aux_loss() + c.router_z_loss_coef * m.moe_z_loss();
}

// Directional derivatives along a fixed ±1 direction over whole tensors,
// against central differences: each tensor's analytic gradient is checked as
// a whole, with an error far below what a wrong term would make.
TEST(MoeLayer, GradientsMatchFiniteDifferences) {
  const ModelConfig cfg = small_moe();
  const int64_t B = 2, T = 6;
  std::vector<int32_t> in, tg;
  for (int64_t i = 0; i < B * T; ++i) {
    in.push_back(static_cast<int32_t>((i * 7 + 3) % cfg.vocab_size));
    tg.push_back(static_cast<int32_t>((i * 11 + 1) % cfg.vocab_size));
  }
  ModelOptions mo;
  mo.max_batch = B;
  mo.max_seq = T;
  Llama m(cfg, mo);
  m.init(5);
  m.zero_grads();
  total_loss(m, in, tg, B, T);
  m.backward(static_cast<float>(1.0 / static_cast<double>(B * T)));
  const std::vector<float> g(m.grads(), m.grads() + m.num_params());
  const double margin = m.moe_stats().min_topk_margin;
  for (const char* name :
       {"model.layers.0.block_sparse_moe.gate.weight", "model.layers.1.block_sparse_moe.gate.weight",
        "model.layers.0.block_sparse_moe.experts.1.w1.weight",
        "model.layers.1.block_sparse_moe.experts.2.w3.weight",
        "model.layers.0.block_sparse_moe.experts.3.w2.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.embed_tokens.weight"}) {
    const ParamSpec& s = m.param_table().find(name);
    const double eps = 2e-3;
    double analytic = 0;
    std::vector<float> dir(static_cast<size_t>(s.numel));
    for (int64_t i = 0; i < s.numel; ++i) {
      dir[static_cast<size_t>(i)] = ((i * 2654435761u) >> 7) % 2 ? 1.0f : -1.0f;
      analytic += g[static_cast<size_t>(s.offset + i)] * dir[static_cast<size_t>(i)];
    }
    float* p = m.params() + s.offset;
    const std::vector<float> saved(p, p + s.numel);
    double f[2];
    for (int side = 0; side < 2; ++side) {
      for (int64_t i = 0; i < s.numel; ++i)
        p[i] = saved[static_cast<size_t>(i)] +
               static_cast<float>((side ? -eps : eps) * dir[static_cast<size_t>(i)]);
      m.zero_grads();
      f[side] = total_loss(m, in, tg, B, T);
    }
    std::copy(saved.begin(), saved.end(), p);
    const double numeric = (f[0] - f[1]) / (2 * eps);
    // A stated bound, not derived (left): the central difference of the fp32
    // model at eps = 2e-3 carries its truncation (eps²/6·f‴) and the fp32
    // loss's rounding over eps (≈ 1e-6/2e-3), neither computed here; 1e-2 is
    // far above both and far below a wrong term's O(1).
    EXPECT_NEAR(analytic, numeric, 1e-2 * std::abs(numeric) + 1e-4)
        << name << " (smallest top-k margin " << margin << ")";
  }
}

TEST(MoeRouter, TiesGoToTheLowerIndexAndWeightsSumToOne) {
  // Token 0: probabilities equal for experts 1 and 3 (the largest): 1 first, then 3.
  const std::vector<float> logits = {0.0f, 2.0f, 1.0f, 2.0f, /* token 1 */ 3.0f, 0.0f, 0.0f, 1.0f};
  std::vector<float> probs(8), lse(2), w(4);
  std::vector<int32_t> e(4);
  const double margin =
      router_forward(probs.data(), lse.data(), e.data(), w.data(), logits.data(), nullptr, {2, 4, 2});
  EXPECT_EQ(e, (std::vector<int32_t>{1, 3, 0, 3}));
  EXPECT_FLOAT_EQ(w[0], 0.5f);
  // Bounds (ops/router.cpp): p = fl(fl(exp(z − m))·fl(1/s)), the sum s in double
  // and z − m exact here: 4u relatively (float exp within 1 ulp, the reciprocal,
  // the product). A weight p_a / (p_a + p_b) cancels 1/s: 7u (two exps, two
  // products, the quotient's rounding); w2 + w3 adds u.
  const double u = testing::kU32;
  EXPECT_TRUE(testing::within_bound(w[2] + w[3], 1.0, 8 * u, "weights sum"));
  EXPECT_TRUE(testing::within_bound(w[2], 1.0 / (1.0 + std::exp(-2.0)), 7 * u, "weight"));  // p0 / (p0 + p3)
  // Token 0's 2nd vs 3rd probability: e^2 - e^1 over the sum; token 1's: (e^1 - e^0) over its sum; each
  // p within 4u, so a margin within 4u·(p_a + p_b).
  const double s0 = 1 + 2 * std::exp(2.0) + std::exp(1.0), s1 = std::exp(3.0) + 2 + std::exp(1.0);
  const double b_margin = 4 * u * std::max((std::exp(2.0) + std::exp(1.0)) / s0, (std::exp(1.0) + 1) / s1);
  EXPECT_TRUE(testing::within_bound(
      margin, std::min((std::exp(2.0) - std::exp(1.0)) / s0, (std::exp(1.0) - 1) / s1), b_margin, "margin"));
  // A bias moves the selection, never the weights.
  const std::vector<float> bias = {0.0f, 0.0f, 0.9f, 0.0f};
  router_forward(probs.data(), lse.data(), e.data(), w.data(), logits.data(), bias.data(), {2, 4, 2});
  EXPECT_EQ(e[0], 2);  // p2 + 0.9 beats p1
  const double w0 = std::exp(1.0) / (std::exp(1.0) + std::exp(2.0));
  EXPECT_TRUE(testing::within_bound(w[0], w0, 7 * u * w0, "biased weight"));
}

TEST(ExpertDispatch, StableSortAndCapacityByChoiceOrder) {
  // 4 tokens, k = 2: choices c = n·2 + s.
  const std::vector<int32_t> expert_of = {2, 0, 0, 2, 2, 1, 0, 2};
  ep::ExpertDispatch d(nullptr, 3);
  ep::RoutePlan p;
  d.plan(p, expert_of.data(), 8, -1);
  EXPECT_EQ(p.count, (std::vector<int64_t>{3, 1, 4}));
  EXPECT_EQ(p.order, (std::vector<int64_t>{1, 2, 6, 5, 0, 3, 4, 7}));
  EXPECT_EQ(p.dropped, 0);
  EXPECT_EQ(ep::expert_capacity(0.75, 4, 2, 3), 2);  // ceil(0.75 · 8 / 3)
  d.plan(p, expert_of.data(), 8, 2);                 // each expert keeps its 2 earliest choices
  EXPECT_EQ(p.count, (std::vector<int64_t>{2, 1, 2}));
  EXPECT_EQ(p.order, (std::vector<int64_t>{1, 2, 5, 0, 3}));
  EXPECT_EQ(p.row_of[6], -1);
  EXPECT_EQ(p.row_of[4], -1);
  EXPECT_EQ(p.dropped, 3);
  // combine of dispatch is the identity on the kept choices; dropped ones are zero.
  const int64_t C = 2;
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8}, xs(static_cast<size_t>(p.rows() * C)), yk(16);
  d.dispatch(xs.data(), x.data(), p, 2, C);
  d.combine(yk.data(), xs.data(), p, C);
  EXPECT_EQ(yk, (std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4, 0, 0, 5, 6, 0, 0, 0, 0}));
}

TEST(MoeBias, MovesTowardTheMeanLoadAfterTheStep) {
  ModelConfig cfg = small_moe();
  cfg.router_bias_rate = 0.01;
  ModelOptions mo;
  mo.max_batch = 1;
  mo.max_seq = 8;
  Llama m(cfg, mo);
  m.init(3);
  std::vector<int32_t> in(8), tg(8);
  for (int i = 0; i < 8; ++i)
    in[static_cast<size_t>(i)] = tg[static_cast<size_t>(i)] = i;
  m.zero_grads();
  m.forward(in.data(), tg.data(), 1, 8);
  m.backward(0.125f);
  for (size_t j = 0; j < 2; ++j) {
    const std::vector<int64_t>& load = m.moe_stats().tokens_per_expert[j];
    const std::vector<float>& bias = m.router_bias(static_cast<int64_t>(j));
    ASSERT_EQ(bias.size(), 4u);
    for (size_t e = 0; e < 4; ++e) {
      const double gap = 16.0 / 4 - static_cast<double>(load[e]);  // 8 tokens × 2 choices
      EXPECT_FLOAT_EQ(bias[e], gap > 0 ? 0.01f : gap < 0 ? -0.01f : 0.0f) << "layer " << j << " expert " << e;
    }
  }
}

Config valid_moe_config() {
  Config c;
  c.model = small_moe();
  c.train.seq_len = 8;
  c.train.batch_size = 2;
  c.train.microbatch_size = 2;
  return c;
}

void expect_refused(Config c, const std::string& part) {
  try {
    c.validate();
    ADD_FAILURE() << "accepted; expected an error containing: " << part;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(MoeConfig, BadInputIsRefusedWithTheNumbers) {
  EXPECT_NO_THROW(valid_moe_config().validate());
  Config c = valid_moe_config();
  c.model.top_k = 5;
  expect_refused(c, "model.top_k (5) must be between 1 and model.n_experts (4)");
  c = valid_moe_config();
  c.model.capacity_factor = -1;
  expect_refused(c, "model.capacity_factor (-1) must not be negative");
  c = valid_moe_config();
  c.model.moe_every = 3;
  expect_refused(c, "model.moe_every (3) must be between 1 and model.n_layers (2)");
  c = valid_moe_config();
  c.parallel.dp = 2;
  c.train.batch_size = 4;
  EXPECT_NO_THROW(c.validate());  // data parallelism: every rank holds every expert
  c.model.router_bias_rate = 0.01;
  EXPECT_NO_THROW(c.validate());  // the bias moves by the global counts (tests/dist/parity_moe.sh)
  c = valid_moe_config();
  c.parallel.tp = 2;
  EXPECT_NO_THROW(c.validate());  // tensor parallelism: experts not split over tp
  c.parallel.sp = true;
  c.model.router_bias_rate = 0.01;  // each tp rank sees its sequence shard's loads only
  expect_refused(c, "model.router_bias_rate (0.01) with parallel.cp (1) or parallel.tp (2) with parallel.sp");
  c = valid_moe_config();
  c.model.router_bias_rate = 0.001;
  c.train.checkpoint_dir = "ck";
  EXPECT_NO_THROW(c.validate());  // checkpoints save the bias (tests/dist/parity_moe.sh)
}

TEST(MoeConfig, ExpertKeysWithoutExpertsAreNamed) {
  EXPECT_EQ(ineffective_keys(parse_config_text("", "t", {"model.top_k=1", "model.capacity_factor=1.5"})),
            (std::vector<std::string>{"model.top_k has no effect with model.n_experts = 0",
                                      "model.capacity_factor has no effect with model.n_experts = 0"}));
  EXPECT_TRUE(ineffective_keys(parse_config_text("", "t", {"model.n_experts=4", "model.top_k=1"})).empty());
}

TEST(MoeSave, MixtralConfigAndRoundTrip) {
  for (int64_t every : {1, 2}) {
    ModelConfig cfg = small_moe();
    cfg.moe_every = every;
    ModelOptions mo;
    mo.max_batch = 1;
    mo.max_seq = 8;
    Llama m(cfg, mo);
    m.init(9);
    const fs::path dir = fs::path(::testing::TempDir()) / ("moe_save_" + std::to_string(every));
    save_model_dir(dir.string(), m);
    std::ifstream f(dir / "config.json");
    const nlohmann::json j = nlohmann::json::parse(f);
    EXPECT_EQ(j["model_type"], every == 1 ? "mixtral" : "meshtrain_moe");
    EXPECT_EQ(j["num_local_experts"], 4);
    EXPECT_EQ(j["num_experts_per_tok"], 2);
    EXPECT_EQ(j["intermediate_size"], every == 1 ? 6 : 12);
    EXPECT_EQ(j["router_jitter_noise"], 0.0);
    EXPECT_TRUE(j["sliding_window"].is_null());
    EXPECT_EQ(j["output_router_logits"], true);
    EXPECT_EQ(j.contains("note"), every != 1);
    const ModelConfig back = read_model_config(dir.string());
    EXPECT_EQ(back.n_experts, 4);
    EXPECT_EQ(back.moe_every, every);
    EXPECT_EQ(back.expert_hidden(), 6);
    EXPECT_TRUE(check_init_from(dir.string(), cfg, "").empty());
    ModelConfig other = cfg;
    other.n_experts = 8;
    EXPECT_THROW(check_init_from(dir.string(), other, ""), ConfigError);
    Llama loaded(back, mo);
    load_model_dir(dir.string(), loaded);
    EXPECT_EQ(std::vector<float>(loaded.params(), loaded.params() + loaded.num_params()),
              std::vector<float>(m.params(), m.params() + m.num_params()));
  }
}

// MFU counts the active parameters; the memory estimate every parameter.
TEST(MoeSizes, ActiveAndTotalParameters) {
  ModelConfig c = small_moe();
  // attention (q|k|v 16·8 + o 8·8 = 192) per layer; per MoE layer the router
  // 4·8 and top_k = 2 experts of 3·6·8; the LM head 29·8.
  EXPECT_EQ(matmul_params(c), 2 * 192 + 2 * (32 + 2 * 144) + 29 * 8);
  c.moe_every = 2;  // layer 1 only; layer 0 a dense MLP of 3·12·8
  EXPECT_EQ(matmul_params(c), 2 * 192 + 288 + (32 + 2 * 144) + 29 * 8);
  for (int64_t every : {1, 2}) {
    c.moe_every = every;
    ModelOptions mo;
    mo.max_seq = 8;
    EXPECT_EQ(checked_param_count(c), Llama(c, mo).num_params()) << "moe_every " << every;
  }
}

// transformers 5's fused expert layout loads into the same parameters as
// Mixtral's per-expert names (docs/FORMATS.md): gate_up_proj [E, 2I, C] with
// w1 then w3 rows per expert, down_proj [E, C, I], the router as mlp.gate.
TEST(MoeSave, ReadsTransformers5FusedExperts) {
  const ModelConfig cfg = small_moe();  // E 4, I 6, C 8, 2 layers
  ModelOptions mo;
  mo.max_seq = 8;
  Llama m(cfg, mo);
  m.init(21);
  const fs::path dir = fs::path(::testing::TempDir()) / "moe_fused";
  save_model_dir(dir.string(), m);
  const int64_t E = 4, I = 6, C = 8;
  std::vector<std::vector<float>> store;  // the fused tensors (a moved vector keeps its buffer)
  std::vector<TensorRef> tensors;
  for (const ParamSpec& s : m.param_table().specs) {
    const float* p = m.params() + s.offset;
    const size_t moe = s.name.find("block_sparse_moe.");
    if (moe == std::string::npos) {
      tensors.push_back({s.name, s.global_shape, p});
      continue;
    }
    const std::string layer = s.name.substr(0, moe);
    if (s.name.find("gate.weight") != std::string::npos) {
      tensors.push_back({layer + "mlp.gate.weight", s.global_shape, p});
    } else if (s.name.find("experts.0.w1") != std::string::npos) {  // build both fused tensors once
      std::vector<float> gate_up(static_cast<size_t>(E * 2 * I * C)), down(static_cast<size_t>(E * C * I));
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = layer + "block_sparse_moe.experts." + std::to_string(e) + ".";
        const float* w1 = m.params() + m.param_table().find(x + "w1.weight").offset;
        const float* w3 = m.params() + m.param_table().find(x + "w3.weight").offset;
        const float* w2 = m.params() + m.param_table().find(x + "w2.weight").offset;
        std::copy(w1, w1 + I * C, gate_up.begin() + e * 2 * I * C);
        std::copy(w3, w3 + I * C, gate_up.begin() + e * 2 * I * C + I * C);
        std::copy(w2, w2 + C * I, down.begin() + e * C * I);
      }
      store.push_back(std::move(gate_up));
      tensors.push_back({layer + "mlp.experts.gate_up_proj", {E, 2 * I, C}, store.back().data()});
      store.push_back(std::move(down));
      tensors.push_back({layer + "mlp.experts.down_proj", {E, C, I}, store.back().data()});
    }
  }
  write_safetensors((dir / "model.safetensors").string(), tensors, {});
  Llama loaded(cfg, mo);
  load_model_dir(dir.string(), loaded);
  EXPECT_EQ(std::vector<float>(loaded.params(), loaded.params() + loaded.num_params()),
            std::vector<float>(m.params(), m.params() + m.num_params()));
}

}  // namespace
}  // namespace mt

// The mixture of experts' parts: gradients against finite differences, the
// router's ties and weights, the dispatch plan and its capacity rule (hand
// derived), the aux-loss-free bias, the start-up refusals, config.json.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bounds.h"
#include "config/config.h"
#include "core/error.h"
#include "cost/flops.h"
#include "cost/memory_estimate.h"
#include "formats/safetensors.h"
#include "model/llama.h"
#include "model/llama_double.h"
#include "ops/reference.h"
#include "ops/router.h"
#include "parallel/expert_parallel.h"
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

// The training loss of the double model (llama_double.h) on parameters x.
struct LossF64 {
  double loss = 0;
  std::vector<int32_t> experts;  // its routing, for the no-flip check
};
LossF64 total_loss_f64(const Llama& m, const std::vector<double>& x, const std::vector<int32_t>& in,
                       const std::vector<int32_t>& tg, int64_t B, int64_t T) {
  const ModelConfig& c = m.config();
  const testing::ForwardF64 f = testing::llama_forward_f64(m, x, in.data(), B, T);
  std::vector<double> losses(static_cast<size_t>(B * T)), lse(losses.size());
  ref::cross_entropy_forward(losses.data(), lse.data(), f.logits.data(), tg.data(), B * T, c.vocab_size,
                             kIgnoreIndex);
  double ce = 0;
  for (double l : losses)
    ce += l;
  return {ce / static_cast<double>(B * T) + c.router_aux_loss_coef * f.aux + c.router_z_loss_coef * f.z,
          f.experts};
}

// ±1 along a fixed pattern over a whole tensor.
std::vector<double> direction(int64_t n) {
  std::vector<double> dir(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    dir[static_cast<size_t>(i)] = ((i * 2654435761u) >> 7) % 2 ? 1.0 : -1.0;
  return dir;
}

// The directional derivative of the double model's loss along dir over the
// tensor at [offset, offset + dir.size()), by central differences at h and
// h/2: D(h/2), its truncation bound and whether the routing stayed that of x.
struct CentralDiff {
  double d = 0, trunc = 0;
  bool same_routing = true;
};
CentralDiff central_diff(const std::function<LossF64(const std::vector<double>&)>& F, std::vector<double> x,
                         int64_t offset, const std::vector<double>& dir, double h,
                         const std::vector<int32_t>& routing) {
  CentralDiff out;
  double D[2];
  for (int half = 0; half < 2; ++half) {
    const double step = half ? h / 2 : h;
    double f[2];
    for (int side = 0; side < 2; ++side) {
      std::vector<double> xs = x;
      for (size_t i = 0; i < dir.size(); ++i)
        xs[static_cast<size_t>(offset) + i] += (side ? -step : step) * dir[i];
      const LossF64 l = F(xs);
      f[side] = l.loss;
      out.same_routing = out.same_routing && l.experts == routing;
    }
    D[half] = (f[0] - f[1]) / (2 * step);
  }
  // D(h) − D(h/2) = (3/4)·c·h² to leading order (c = f‴/6 along dir), so D(h/2)
  // errs by a third of the difference; 4/3 of it (D(h)'s error, 4 times
  // that) leaves room for the O(h⁴) terms (Richardson).
  out.d = D[1];
  out.trunc = 4.0 / 3.0 * std::abs(D[0] - D[1]);
  return out;
}

// Directional derivatives along a fixed ±1 direction over whole tensors: the
// fp32 backward against central differences of the double model
// (llama_double.h) at the same parameters, so the check holds the backward
// to the forward's math with no fp32 rounding in the difference quotient: an
// fp32 quotient at step h carries the fp32 loss's rounding divided by h (500
// times it at h = 2e-3), for which no tight a priori bound exists; in double
// that term is 2⁻²⁹ as large, and the bound is derived:
// |A − D| ≤ truncation (Richardson, above) + double rounding + A's own error.
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
  const double f32 = total_loss(m, in, tg, B, T);
  m.backward(static_cast<float>(1.0 / static_cast<double>(B * T)));
  const std::vector<float> g(m.grads(), m.grads() + m.num_params());
  // The same model without the load-balancing loss's gradient: a dropped term,
  // which must miss the difference quotient by orders of magnitude.
  ModelConfig no_aux_cfg = cfg;
  no_aux_cfg.router_aux_loss_coef = 0;
  Llama bug(no_aux_cfg, mo);
  bug.init(5);
  bug.zero_grads();
  total_loss(bug, in, tg, B, T);
  bug.backward(static_cast<float>(1.0 / static_cast<double>(B * T)));
  const std::vector<double> x(m.params(), m.params() + m.num_params());
  const auto F = [&](const std::vector<double>& p) { return total_loss_f64(m, p, in, tg, B, T); };
  const LossF64 at_x = F(x);
  // The fp32 loss's own distance from double, relative: this problem's fp32
  // rounding, which the bounds below scale (layout_tol's rule, bounds.h).
  const double d = std::abs(f32 - at_x.loss) / std::abs(at_x.loss);
  const double floor = static_cast<double>(B * T) * testing::kU32;
  const double rel = 10.0 * std::max(d, floor);
  // The double model must be this model, or d would widen the bound. The
  // loss sums positive terms (N cross-entropies, the aux and z losses), so
  // its last sum rounds within N·u of its value; a correct double model is
  // within 10 times that (the rule's multiple; 6.7e-9 here against 7.2e-6),
  // while a wrong term moves the loss by 1e-3 or more (the weights'
  // renormalisation dropped: 2.9e-3). test_moe.cpp also holds the double
  // model to PyTorch float64.
  ASSERT_LT(d, 10 * floor) << "the double model's loss " << at_x.loss << " is not the fp32 model's " << f32;
  const double margin = m.moe_stats().min_topk_margin;
  char trace[96];
  std::snprintf(trace, sizeof trace, "smallest top-k margin %.3e, fp32 loss %.3e from double", margin, d);
  SCOPED_TRACE(trace);
  const double h = 0x1p-10;
  for (const char* name :
       {"model.layers.0.block_sparse_moe.gate.weight", "model.layers.1.block_sparse_moe.gate.weight",
        "model.layers.0.block_sparse_moe.experts.1.w1.weight",
        "model.layers.1.block_sparse_moe.experts.3.w3.weight",
        "model.layers.0.block_sparse_moe.experts.3.w2.weight",
        "model.layers.0.post_attention_layernorm.weight", "model.layers.0.self_attn.q_proj.weight",
        "model.embed_tokens.weight"}) {
    const ParamSpec& s = m.param_table().find(name);
    const std::vector<double> dir = direction(s.numel);
    double A = 0, A_bug = 0, g2 = 0, gx = 0;
    for (int64_t i = 0; i < s.numel; ++i) {
      const auto j = static_cast<size_t>(s.offset + i);
      A += g[j] * dir[static_cast<size_t>(i)];
      A_bug += bug.grads()[j] * dir[static_cast<size_t>(i)];
      g2 += static_cast<double>(g[j]) * g[j];
      gx += std::abs(g[j]) * (std::abs(x[j]) + h);
    }
    ASSERT_GT(g2, 0.0) << name << ": no token reaches it, so the check would hold trivially";
    const CentralDiff D = central_diff(F, x, s.offset, dir, h, at_x.experts);
    ASSERT_TRUE(D.same_routing) << name << ": a top-k choice flips within ±h; the difference quotient "
                                << "crosses a jump";
    // The fp32 backward's error: per tensor ‖δg‖₂ ≤ rel·‖g‖₂, the rule
    // test_moe.cpp holds every gradient to against PyTorch float64 (there
    // with PyTorch fp32's gradient distance, here with the forward's d: the
    // backward runs the forward's products transposed over the same N
    // tokens); so |δA| ≤ ‖δg‖₂·‖dir‖₂ = √n·rel·‖g‖₂ (Cauchy–Schwarz).
    const double b_analytic = std::sqrt(static_cast<double>(s.numel) * g2) * rel;
    // The double loss's rounding: the fp32 loss's by the same rule, scaled
    // by u64/u32; each side's over 2·(h/2). The steps x ± h·dir round by
    // u64·(|x| + h), moving the quotient by at most Σ|g|·that/h.
    const double b_round =
        2 * rel * std::abs(at_x.loss) * (testing::kU64 / testing::kU32) / h + 2 * testing::kU64 * gx / h;
    const double bound = D.trunc + b_round + b_analytic;
    EXPECT_TRUE(testing::within_bound(A, D.d, bound, name));
    if (std::string(name).find("gate.weight") != std::string::npos) {  // the aux loss reaches the router
      EXPECT_GT(std::abs(A_bug - D.d), 100 * bound) << name << ": without the aux loss's gradient";
      std::printf(
          "%s: |A - D| %.2e of a bound %.2e (truncation %.2e, double rounding %.2e, fp32 backward "
          "%.2e; fp32 loss %.2e from double); without the aux gradient %.0f bounds\n",
          name, std::abs(A - D.d), bound, D.trunc, b_round, b_analytic, d, std::abs(A_bug - D.d) / bound);
    }
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

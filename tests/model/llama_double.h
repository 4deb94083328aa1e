// A Llama's forward in double on a model's own parameters, through the
// double references of ops/reference.h and ops/attention_reference.h: the
// float64 run of the same model that the decoding tests measure the fp32
// model's own rounding against (testing::layout_tol, tests/bounds.h), and
// that the MoE finite-difference check differentiates (test_moe_parts.cpp).
// Dense or mixture of experts (dropless, no router bias: docs/MODEL.md
// "Mixture of experts"), one process, no dropout; positions 0..T−1 of each
// sequence.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/llama.h"
#include "ops/attention_reference.h"
#include "ops/reference.h"
#include "ops/rope_scaling.h"

namespace mt::testing {

// The MoE MLP of one layer in double: router logits h·Wgᵀ, softmax, the top k
// probabilities (a tie to the lower expert), their renormalised weights, the
// SwiGLU experts' weighted sum added to x; the router statistics (each slot's
// choices, the probabilities' and lse²'s sums) accumulate in `out`.
struct ForwardF64 {
  std::vector<double> logits;       // [B·T, V]
  double aux = 0, z = 0;            // the load-balancing and z losses, unscaled (MoeTally's)
  std::vector<int32_t> experts;     // each MoE layer's [N, k] choices, in layer order
  std::vector<double> count, psum;  // [k·E] choices per slot and expert, [E] Σ p
  double zsum = 0, rows = 0;
};

template <class Param>
void moe_mlp_f64(std::vector<double>& x, const std::vector<double>& h, const std::string& pre,
                 const ModelConfig& cfg, int64_t N, const Param& P, ForwardF64& out) {
  const int64_t C = cfg.d_model, E = cfg.n_experts, K = cfg.top_k, I = cfg.expert_hidden();
  std::vector<double> r(static_cast<size_t>(N * E));
  ref::linear_forward(r.data(), h.data(), P(pre + "block_sparse_moe.gate.weight").data(), N, C, E);
  out.count.resize(static_cast<size_t>(K * E));
  out.psum.resize(static_cast<size_t>(E));
  std::vector<double> gu(static_cast<size_t>(2 * I)), z(static_cast<size_t>(I)), y(static_cast<size_t>(C));
  for (int64_t n = 0; n < N; ++n) {
    double* row = r.data() + n * E;
    const double mx = *std::max_element(row, row + E);
    double s = 0;
    for (int64_t e = 0; e < E; ++e)
      s += std::exp(row[e] - mx);
    const double lse = mx + std::log(s);
    for (int64_t e = 0; e < E; ++e)
      row[e] = std::exp(row[e] - lse);
    out.zsum += lse * lse;
    std::vector<int32_t> order(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e)
      order[static_cast<size_t>(e)] = static_cast<int32_t>(e);
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    double wsum = 0;
    for (int64_t k = 0; k < K; ++k)
      wsum += row[order[static_cast<size_t>(k)]];
    for (int64_t e = 0; e < E; ++e)
      out.psum[static_cast<size_t>(e)] += row[e];
    for (int64_t k = 0; k < K; ++k) {
      const int32_t e = order[static_cast<size_t>(k)];
      out.experts.push_back(e);
      out.count[static_cast<size_t>(k * E + e)] += 1;
      const std::string w = pre + "block_sparse_moe.experts." + std::to_string(e) + ".";
      const std::vector<double> W1 = P(w + "w1.weight"), W3 = P(w + "w3.weight"), W2 = P(w + "w2.weight");
      ref::linear_forward(gu.data(), h.data() + n * C, W1.data(), 1, C, I);
      ref::linear_forward(gu.data() + I, h.data() + n * C, W3.data(), 1, C, I);
      ref::swiglu_forward(z.data(), gu.data(), 1, I);
      ref::linear_forward(y.data(), z.data(), W2.data(), 1, I, C);
      for (int64_t c = 0; c < C; ++c)
        x[static_cast<size_t>(n * C + c)] += row[e] / wsum * y[static_cast<size_t>(c)];
    }
  }
  out.rows += static_cast<double>(N);
}

// The forward of tokens [B, T] on parameters `params` (the model's layout,
// m.num_params() values): logits, and for a MoE model its router losses and
// choices.
inline ForwardF64 llama_forward_f64(const Llama& m, const std::vector<double>& params, const int32_t* tokens,
                                    int64_t B, int64_t T) {
  const ModelConfig& cfg = m.config();
  const auto P = [&](const std::string& name) {
    const ParamSpec& s = m.param_table().find(name);
    return std::vector<double>(params.begin() + s.offset, params.begin() + s.offset + s.numel);
  };
  ForwardF64 out;
  const int64_t N = B * T, C = cfg.d_model, H = cfg.n_heads, KV = cfg.n_kv_heads, D = cfg.head_dim(),
                F = cfg.ffn_hidden, V = cfg.vocab_size;
  const std::vector<double> E = P("model.embed_tokens.weight");
  std::vector<double> x(static_cast<size_t>(N * C));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      x[static_cast<size_t>(n * C + c)] = E[static_cast<size_t>(tokens[n] * C + c)];
  const RopeScaling rs = cfg.rope();
  const int64_t L = rs.type == RopeType::dynamic ? T : cfg.max_seq_len;  // as Llama::forward
  const std::vector<double> inv = rope_inv_freq(rs, D, cfg.rope_theta, cfg.max_seq_len, L);
  const double af = rope_attention_factor(rs);
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % T);
  const auto rope = [&](std::vector<double>& y, int64_t heads) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < D / 2; ++i) {
          const double a = pos[static_cast<size_t>(n)] * inv[static_cast<size_t>(i)];
          const double cs = std::cos(a) * af, sn = std::sin(a) * af;
          double& lo = y[static_cast<size_t>((n * heads + h) * D + i)];
          double& hi = y[static_cast<size_t>((n * heads + h) * D + i + D / 2)];
          const double l0 = lo, h0 = hi;
          lo = l0 * cs - h0 * sn;
          hi = h0 * cs + l0 * sn;
        }
  };
  std::vector<double> h(x.size()), rstd(static_cast<size_t>(N)), q(static_cast<size_t>(N * H * D)),
      k(static_cast<size_t>(N * KV * D)), v(k.size()), a(q.size()), lse(static_cast<size_t>(B * H * T)),
      o(x.size()), g(static_cast<size_t>(N * F)), up(g.size()), gu(static_cast<size_t>(N * 2 * F)),
      z(g.size());
  const double eps = static_cast<float>(cfg.norm_eps);  // the fp32 model's eps
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    ref::rmsnorm_forward(h.data(), rstd.data(), x.data(), P(pre + "input_layernorm.weight").data(), N, C,
                         eps);
    ref::linear_forward(q.data(), h.data(), P(pre + "self_attn.q_proj.weight").data(), N, C, H * D);
    ref::linear_forward(k.data(), h.data(), P(pre + "self_attn.k_proj.weight").data(), N, C, KV * D);
    ref::linear_forward(v.data(), h.data(), P(pre + "self_attn.v_proj.weight").data(), N, C, KV * D);
    rope(q, H);
    rope(k, KV);
    const AttentionDims d{B, T, T, H, KV, D, H * D, KV * D, H * D};
    ref::attention_forward(a.data(), lse.data(), q.data(), k.data(), v.data(), pos.data(), pos.data(), d);
    ref::linear_forward(o.data(), a.data(), P(pre + "self_attn.o_proj.weight").data(), N, H * D, C);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] += o[i];
    ref::rmsnorm_forward(h.data(), rstd.data(), x.data(), P(pre + "post_attention_layernorm.weight").data(),
                         N, C, eps);
    if (cfg.is_moe_layer(l)) {
      moe_mlp_f64(x, h, pre, cfg, N, P, out);
      continue;
    }
    ref::linear_forward(g.data(), h.data(), P(pre + "mlp.gate_proj.weight").data(), N, C, F);
    ref::linear_forward(up.data(), h.data(), P(pre + "mlp.up_proj.weight").data(), N, C, F);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t f = 0; f < F; ++f) {
        gu[static_cast<size_t>(n * 2 * F + f)] = g[static_cast<size_t>(n * F + f)];
        gu[static_cast<size_t>(n * 2 * F + F + f)] = up[static_cast<size_t>(n * F + f)];
      }
    ref::swiglu_forward(z.data(), gu.data(), N, F);
    ref::linear_forward(o.data(), z.data(), P(pre + "mlp.down_proj.weight").data(), N, F, C);
    for (size_t i = 0; i < x.size(); ++i)
      x[i] += o[i];
  }
  ref::rmsnorm_forward(h.data(), rstd.data(), x.data(), P("model.norm.weight").data(), N, C, eps);
  out.logits.resize(static_cast<size_t>(N * V));
  ref::linear_forward(out.logits.data(), h.data(), (cfg.tie_embeddings ? E : P("lm_head.weight")).data(), N,
                      C, V);
  if (out.rows > 0) {  // MoeTally::aux_loss and z_loss
    const int64_t Ex = cfg.n_experts;
    for (size_t i = 0; i < out.count.size(); ++i)
      out.aux += out.count[i] / out.rows * (out.psum[i % static_cast<size_t>(Ex)] / out.rows);
    out.aux *= static_cast<double>(Ex);
    out.z = out.zsum / out.rows;
  }
  return out;
}

// Logits [B·T, V] of tokens [B, T] on the model's own parameters.
inline std::vector<double> llama_logits_f64(const Llama& m, const int32_t* tokens, int64_t B, int64_t T) {
  const std::vector<double> params(m.params(), m.params() + m.num_params());
  return llama_forward_f64(m, params, tokens, B, T).logits;
}

// max |a − b| over n elements.
inline double max_abs_diff_f64(const float* a, const double* b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

}  // namespace mt::testing

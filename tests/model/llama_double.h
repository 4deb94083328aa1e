// A dense Llama's forward in double on a model's own parameters, through the
// double references of ops/reference.h and ops/attention_reference.h: the
// float64 run of the same model that the decoding tests measure the fp32
// model's own rounding against (testing::layout_tol, tests/bounds.h). Dense,
// one process, no dropout; positions 0..T−1 of each sequence.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "model/llama.h"
#include "ops/attention_reference.h"
#include "ops/reference.h"
#include "ops/rope_scaling.h"

namespace mt::testing {

// Logits [B·T, V] of tokens [B, T].
inline std::vector<double> llama_logits_f64(const Llama& m, const int32_t* tokens, int64_t B, int64_t T) {
  const ModelConfig& cfg = m.config();
  const auto P = [&](const std::string& name) {
    const ParamSpec& s = m.param_table().find(name);
    return std::vector<double>(m.params() + s.offset, m.params() + s.offset + s.numel);
  };
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
  std::vector<double> logits(static_cast<size_t>(N * V));
  ref::linear_forward(logits.data(), h.data(), (cfg.tie_embeddings ? E : P("lm_head.weight")).data(), N, C,
                      V);
  return logits;
}

// max |a − b| over n elements.
inline double max_abs_diff_f64(const float* a, const double* b, int64_t n) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i)
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

}  // namespace mt::testing

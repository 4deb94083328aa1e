#include "model/config.h"

#include "core/error.h"

namespace mt {

void ModelConfig::validate() const {
  auto positive = [](const char* name, int64_t v) {
    MT_REQUIRE(v > 0, ConfigError, "model.", name, " (", v, ") must be positive");
  };
  positive("vocab_size", vocab_size);
  positive("d_model", d_model);
  positive("n_layers", n_layers);
  positive("n_heads", n_heads);
  positive("n_kv_heads", n_kv_heads);
  positive("ffn_hidden", ffn_hidden);
  positive("max_seq_len", max_seq_len);
  for (const auto& [name, p] :
       {std::pair{"attention_dropout", attention_dropout}, {"hidden_dropout", hidden_dropout}})
    MT_REQUIRE(p >= 0 && p < 1, ConfigError, "model.", name, " (", p, ") must be in [0, 1)");
  MT_REQUIRE(hidden_dropout == 0 || !moe(), ConfigError, "model.hidden_dropout (", hidden_dropout,
             ") with model.n_experts (", n_experts,
             "): dropout of the experts' output is not built yet (model.attention_dropout is)");
  MT_REQUIRE(vocab_size <= (int64_t{1} << 31) - 1, ConfigError, "model.vocab_size (", vocab_size,
             ") must fit in a 32-bit token id");
  MT_REQUIRE(d_model % n_heads == 0, ConfigError, "model.d_model (", d_model,
             ") must be divisible by model.n_heads (", n_heads, ")");
  MT_REQUIRE(n_heads % n_kv_heads == 0, ConfigError, "model.n_heads (", n_heads,
             ") must be divisible by model.n_kv_heads (", n_kv_heads, ")");
  MT_REQUIRE(head_dim() % 2 == 0, ConfigError, "head_dim = d_model / n_heads = ", d_model, " / ", n_heads,
             " = ", head_dim(), " must be even (RoPE rotates pairs of dimensions)");
  MT_REQUIRE(rope_theta > 0, ConfigError, "model.rope_theta (", rope_theta, ") must be positive");
  const RopeScaling rs = rope();  // ConfigError naming model.rope_scaling
  MT_REQUIRE(rs.type != RopeType::dynamic || head_dim() > 2, ConfigError,
             "dynamic RoPE scaling needs head_dim > 2 (got ", head_dim(), ")");
  MT_REQUIRE(norm_eps > 0, ConfigError, "model.norm_eps (", norm_eps, ") must be positive");
  MT_REQUIRE(init_std > 0, ConfigError, "model.init_std (", init_std, ") must be positive");
  validate_moe();
}

void ModelConfig::validate_moe() const {
  MT_REQUIRE(n_experts >= 0, ConfigError, "model.n_experts (", n_experts, ") must not be negative");
  MT_REQUIRE(capacity_factor >= 0, ConfigError, "model.capacity_factor (", capacity_factor,
             ") must not be negative (0: dropless, > 0: each expert's capacity)");
  MT_REQUIRE(router_aux_loss_coef >= 0, ConfigError, "model.router_aux_loss_coef (", router_aux_loss_coef,
             ") must not be negative");
  MT_REQUIRE(router_z_loss_coef >= 0, ConfigError, "model.router_z_loss_coef (", router_z_loss_coef,
             ") must not be negative");
  MT_REQUIRE(router_bias_rate >= 0, ConfigError, "model.router_bias_rate (", router_bias_rate,
             ") must not be negative");
  MT_REQUIRE(router_skew >= 0, ConfigError, "model.router_skew (", router_skew, ") must not be negative");
  MT_REQUIRE(expert_ffn_hidden >= 0, ConfigError, "model.expert_ffn_hidden (", expert_ffn_hidden,
             ") must not be negative (0: model.ffn_hidden)");
  if (!moe()) return;
  MT_REQUIRE(moe_every >= 1 && moe_every <= n_layers, ConfigError, "model.moe_every (", moe_every,
             ") must be between 1 and model.n_layers (", n_layers, ")");
  MT_REQUIRE(top_k >= 1 && top_k <= n_experts, ConfigError, "model.top_k (", top_k,
             ") must be between 1 and model.n_experts (", n_experts, ")");
}

RopeTable ModelConfig::rope_table(const RopeScaling& rs, int64_t seq_len) const {
  return RopeTable(max_seq_len, rope_inv_freq(rs, head_dim(), rope_theta, max_seq_len, seq_len),
                   rope_attention_factor(rs), seq_len);
}

}  // namespace mt

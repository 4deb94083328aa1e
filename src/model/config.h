// The model's hyper-parameters ([model] section). Semantics are those of
// Hugging Face LlamaForCausalLM; docs/MODEL.md lists every convention.
#pragma once

#include <cstdint>
#include <string>

#include "ops/rope.h"
#include "ops/rope_scaling.h"

namespace mt {

struct ModelConfig {
  int64_t vocab_size = 8192;
  int64_t d_model = 512;      // hidden_size
  int64_t n_layers = 8;       // num_hidden_layers
  int64_t n_heads = 8;        // num_attention_heads
  int64_t n_kv_heads = 8;     // num_key_value_heads (grouped-query attention when < n_heads)
  int64_t ffn_hidden = 1376;  // intermediate_size
  int64_t max_seq_len = 256;  // max_position_embeddings
  double rope_theta = 10000.0;
  // RoPE scaling (rope_scaling in config.json), spelled as the config key:
  // "none", or e.g. "yarn,factor=8,original_max_position_embeddings=128"
  // (ops/rope_scaling.h, docs/MODEL.md).
  std::string rope_scaling = "none";
  double norm_eps = 1e-5;  // rms_norm_eps
  bool tie_embeddings = false;
  double init_std = 0.02;  // std of the normal initialisation
  // Dropout in training (docs/MODEL.md "Dropout"): on the attention
  // probabilities (Hugging Face's attention_dropout) and on the outputs of
  // o_proj and down_proj before the residual add (ours).
  double attention_dropout = 0.0;
  double hidden_dropout = 0.0;
  // Mixture of experts (Mixtral; docs/MODEL.md "Mixture of experts"). n_experts
  // 0: a dense model. Otherwise every moe_every-th layer (layers moe_every−1,
  // 2·moe_every−1, …) has a router over n_experts SwiGLU experts of hidden
  // size expert_ffn_hidden, each token using its top_k.
  int64_t n_experts = 0;
  int64_t moe_every = 1;
  int64_t top_k = 2;
  int64_t expert_ffn_hidden = 0;      // 0: ffn_hidden
  double router_aux_loss_coef = 0.0;  // the load-balancing loss's weight in the training loss
  double router_z_loss_coef = 0.0;    // the router z-loss's weight (our extension)
  double capacity_factor = 0.0;       // 0: dropless; > 0: each expert takes at most ceil(cf·N·k/E) rows
  double router_bias_rate = 0.0;      // > 0: aux-loss-free balancing, the bias's step per optimizer step
  // A test knob (ours): the selection bias of expert 0 starts at this value
  // in every MoE layer, so expert 0 wins most tokens (the congestion case of
  // docs/BENCHMARKS.md); moved by the bias rule only when router_bias_rate > 0.
  double router_skew = 0.0;

  int64_t head_dim() const { return d_model / n_heads; }
  int64_t q_dim() const { return n_heads * head_dim(); }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }
  bool moe() const { return n_experts > 0; }
  // Whether decoder layer l (0-based) has the mixture of experts.
  bool is_moe_layer(int64_t l) const { return moe() && (l + 1) % moe_every == 0; }
  int64_t n_moe_layers() const { return moe() ? n_layers / moe_every : 0; }
  int64_t expert_hidden() const { return expert_ffn_hidden > 0 ? expert_ffn_hidden : ffn_hidden; }

  // Parses rope_scaling: once, where a model or a run starts (validate, the
  // model's constructor), which keeps the typed value for its use sites.
  RopeScaling rope() const { return parse_rope_scaling(rope_scaling); }
  // cos/sin of positions [0, max_seq_len) for a sequence of seq_len tokens
  // under `scaling` (this config's rope(); only dynamic scaling depends on seq_len).
  RopeTable rope_table(const RopeScaling& scaling, int64_t seq_len) const;

  // Throws ConfigError naming the values and the rule that fails.
  void validate() const;
  void validate_moe() const;  // the mixture-of-experts keys (part of validate)
};

}  // namespace mt

// The model's hyper-parameters ([model] section). Semantics are those of
// Hugging Face LlamaForCausalLM; docs/MODEL.md lists every convention.
#pragma once

#include <cstdint>

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
  double norm_eps = 1e-5;  // rms_norm_eps
  bool tie_embeddings = false;
  double init_std = 0.02;  // std of the normal initialisation

  int64_t head_dim() const { return d_model / n_heads; }
  int64_t q_dim() const { return n_heads * head_dim(); }
  int64_t kv_dim() const { return n_kv_heads * head_dim(); }
  int64_t qkv_dim() const { return q_dim() + 2 * kv_dim(); }

  // Throws ConfigError naming the values and the rule that fails.
  void validate() const;
};

}  // namespace mt

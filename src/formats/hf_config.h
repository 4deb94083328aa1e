// config.json of a Hugging Face Llama model (transformers' LlamaConfig): the
// keys our model understands, so that a model directory we write loads with
// LlamaForCausalLM.from_pretrained and one published on the Hub loads here.
#pragma once

#include <cstdint>
#include <string>

namespace mt {

struct HfLlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t max_position_embeddings = 0;
  double rope_theta = 10000.0;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  double attention_dropout = 0;  // transformers' LlamaConfig field (training only)
  double hidden_dropout = 0;     // ours: on o_proj and down_proj outputs (training only)
  // Mixture of experts (0 experts: a Llama). Every layer: a Mixtral
  // (model_type "mixtral", intermediate_size the experts' hidden size); every
  // moe_every-th layer (> 1): our own model_type "meshtrain_moe", which is not
  // a Mixtral (intermediate_size the dense layers', expert_intermediate_size).
  int64_t num_local_experts = 0;
  int64_t num_experts_per_tok = 0;
  int64_t moe_every = 1;
  int64_t expert_intermediate_size = 0;
  double router_aux_loss_coef = 0;
  double router_z_loss_coef = 0;  // ours
  double capacity_factor = 0;     // ours
  // The RoPE scaling, in the spelling of model.rope_scaling
  // (ops/rope_scaling.h): "none", or e.g. "linear,factor=4".
  std::string rope_scaling = "none";
};

// ConfigError naming `source` and the value unless every size is positive,
// hidden_size is divisible by num_attention_heads and num_attention_heads by
// num_key_value_heads.
void check_hf_config(const HfLlamaConfig& cfg, const std::string& source);

// Writes config.json atomically: the fields above (a scaling as the object
// "rope_scaling": {"rope_type", "factor", ...}) plus "architectures":
// ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
// "torch_dtype": "float32", "attention_bias": false, "mlp_bias": false; with
// experts the Mixtral (or meshtrain_moe) fields instead (docs/FORMATS.md).
void write_hf_config(const std::string& path, const HfLlamaConfig& cfg);

// Reads config.json. As in transformers, an absent (or null)
// num_key_value_heads means num_attention_heads, rope_theta 10000 and
// tie_word_embeddings false; the other fields are required. Both spellings of
// RoPE are read: transformers 4's top-level "rope_theta" and "rope_scaling",
// and transformers 5's "rope_parameters": {"rope_theta", "rope_type", ...}
// (a rope_type other than "default" is a scaling); the two must agree when both
// are present. A scaling's type ("rope_type", or the older "type") must be
// none/default, linear, dynamic, yarn or llama3 with the fields that type
// takes (ops/rope_scaling.h). ConfigError naming the key for a missing key or a wrong type, and
// for features our model does not implement (model_type other than llama,
// hidden_act other than silu, attention or MLP biases, a head_dim
// other than hidden_size / num_attention_heads, a RoPE scaling field we do not
// implement such as mscale or truncate; mixture-of-experts models other than
// "mixtral" with router_jitter_noise 0 and no sliding window, and our
// "meshtrain_moe"); IoError if the file cannot be read.
HfLlamaConfig read_hf_config(const std::string& path);

}  // namespace mt

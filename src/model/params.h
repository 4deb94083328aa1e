// The model's parameters: one flat fp32 buffer, and a table naming each
// parameter's slice of it with its Hugging Face name and shape.
//
// Order in the buffer: embed_tokens; per layer: input_layernorm, q_proj, k_proj,
// v_proj, o_proj, post_attention_layernorm, gate_proj, up_proj, down_proj; then
// norm and lm_head (absent when embeddings are tied). q, k and v are adjacent,
// so together they are the stacked weight [(H + 2·KV)·D, C] of one fused QKV
// GEMM; gate and up likewise form one [2F, C] weight. A flat buffer makes the
// optimizer, clipping and (later) ZeRO sharding and gradient buckets simple.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "parallel/store.h"

namespace mt {

enum class ParamInit { normal, residual_out, ones };

struct ParamSpec {
  std::string name;            // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // [out, in] for weights, like PyTorch
  int64_t offset = 0;          // first element in the flat buffer
  int64_t numel = 0;
  ParamInit init = ParamInit::normal;
  bool weight_decay = true;  // false for norms and embeddings
};

// Offsets into the flat buffer of one layer's parameters.
struct LayerParamOffsets {
  int64_t ln1, qkv, o, ln2, gate_up, down;
};

struct ParamTable {
  std::vector<ParamSpec> specs;
  std::vector<LayerParamOffsets> layers;
  int64_t embed = 0, norm = 0, lm_head = 0;  // lm_head == embed when tied
  int64_t total = 0;

  const ParamSpec& find(const std::string& name) const;  // throws ConfigError listing a few names
};

ParamTable make_param_table(const ModelConfig& cfg);

// Initialises params[0, table.total): element i of parameter p is a pure
// function of (seed, p.name, i) — Philox normal · init_std (· 1/sqrt(2·n_layers)
// for residual output projections), or 1 for norm weights.
void init_params(float* params, const ParamTable& table, const ModelConfig& cfg, uint64_t seed);

// The same rule for any slice of one parameter: elements [first, first + n) of
// `spec` into out[n]. A shard generated alone equals the slice of the full tensor.
void init_param_slice(const ParamSpec& spec, const ModelConfig& cfg, uint64_t seed, int64_t first, int64_t n,
                      float* out);

// The units the model computes one at a time: 0 = the embedding, 1 … n_layers
// = the decoder blocks, n_layers + 1 = the final norm (and the LM head unless
// tied: a tied head is unit 0's matrix).
std::vector<UnitSpec> make_units(const ParamTable& table, const ModelConfig& cfg);

}  // namespace mt

#include "model/params.h"

#include <cmath>

#include "core/error.h"
#include "core/philox.h"

namespace mt {

const ParamSpec& ParamTable::find(const std::string& name) const {
  for (const auto& s : specs) {
    if (s.name == name) return s;
  }
  std::string some;
  for (size_t i = 0; i < specs.size() && i < 4; ++i)
    some += (i ? ", " : "") + specs[i].name;
  MT_THROW(ConfigError, "no parameter named '", name, "' (parameters include ", some, ", ...)");
}

ParamTable make_param_table(const ModelConfig& cfg) {
  ParamTable t;
  const int64_t C = cfg.d_model, F = cfg.ffn_hidden, V = cfg.vocab_size;
  auto add = [&](std::string name, std::vector<int64_t> shape, ParamInit init, bool decay) {
    ParamSpec s;
    s.name = std::move(name);
    s.shape = std::move(shape);
    s.offset = t.total;
    s.numel = 1;
    for (int64_t d : s.shape)
      s.numel *= d;
    s.init = init;
    s.weight_decay = decay;
    t.total += s.numel;
    t.specs.push_back(std::move(s));
    return t.specs.back().offset;
  };
  t.embed = add("model.embed_tokens.weight", {V, C}, ParamInit::normal, false);
  for (int64_t l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerParamOffsets o{};
    o.ln1 = add(p + "input_layernorm.weight", {C}, ParamInit::ones, false);
    o.qkv = add(p + "self_attn.q_proj.weight", {cfg.q_dim(), C}, ParamInit::normal, true);
    add(p + "self_attn.k_proj.weight", {cfg.kv_dim(), C}, ParamInit::normal, true);
    add(p + "self_attn.v_proj.weight", {cfg.kv_dim(), C}, ParamInit::normal, true);
    o.o = add(p + "self_attn.o_proj.weight", {C, cfg.q_dim()}, ParamInit::residual_out, true);
    o.ln2 = add(p + "post_attention_layernorm.weight", {C}, ParamInit::ones, false);
    o.gate_up = add(p + "mlp.gate_proj.weight", {F, C}, ParamInit::normal, true);
    add(p + "mlp.up_proj.weight", {F, C}, ParamInit::normal, true);
    o.down = add(p + "mlp.down_proj.weight", {C, F}, ParamInit::residual_out, true);
    t.layers.push_back(o);
  }
  t.norm = add("model.norm.weight", {C}, ParamInit::ones, false);
  t.lm_head = cfg.tie_embeddings ? t.embed : add("lm_head.weight", {V, C}, ParamInit::normal, true);
  return t;
}

void init_param_slice(const ParamSpec& s, const ModelConfig& cfg, uint64_t seed, int64_t first, int64_t n,
                      float* out) {
  const double residual_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(cfg.n_layers));
  switch (s.init) {
    case ParamInit::ones:
      for (int64_t i = 0; i < n; ++i)
        out[i] = 1.0f;
      break;
    case ParamInit::normal:
      fill_normal(out, n, philox_key(seed, s.name), static_cast<uint64_t>(first),
                  static_cast<float>(cfg.init_std));
      break;
    case ParamInit::residual_out:
      fill_normal(out, n, philox_key(seed, s.name), static_cast<uint64_t>(first),
                  static_cast<float>(cfg.init_std * residual_scale));
      break;
  }
}

void init_params(float* params, const ParamTable& table, const ModelConfig& cfg, uint64_t seed) {
  for (const auto& s : table.specs)
    init_param_slice(s, cfg, seed, 0, s.numel, params + s.offset);
}

std::vector<UnitSpec> make_units(const ParamTable& table, const ModelConfig& cfg) {
  std::vector<UnitSpec> units;
  auto unit_of = [&](const ParamSpec& s) -> size_t {
    if (s.offset < table.embed + cfg.vocab_size * cfg.d_model) return 0;
    for (size_t l = 0; l < table.layers.size(); ++l) {
      const int64_t begin = table.layers[l].ln1;
      const int64_t end = l + 1 < table.layers.size() ? table.layers[l + 1].ln1 : table.norm;
      if (s.offset >= begin && s.offset < end) return l + 1;
    }
    return table.layers.size() + 1;
  };
  units.resize(table.layers.size() + 2);
  units[0].name = "embed";
  for (size_t l = 0; l < table.layers.size(); ++l)
    units[l + 1].name = "layer " + std::to_string(l);
  units.back().name = "final";
  for (const auto& s : table.specs) {
    UnitSpec& u = units[unit_of(s)];
    if (u.params.empty()) u.begin = s.offset;
    u.end = s.offset + s.numel;
    u.params.push_back({s.name, s.offset, s.shape[0], s.numel / s.shape[0], s.weight_decay});
  }
  return units;
}

}  // namespace mt

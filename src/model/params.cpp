#include "model/params.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/philox.h"
#include "parallel/vocab_parallel.h"

namespace mt {

TpDims tp_dims(const ModelConfig& cfg, TpRank tp) {
  const int64_t P = tp.size, t = tp.rank;
  MT_REQUIRE(P >= 1 && t >= 0 && t < P, ConfigError, "tp rank ", t, " is outside a tp group of ", P);
  MT_REQUIRE(cfg.n_heads % P == 0, ConfigError, "model.n_heads (", cfg.n_heads,
             ") must be divisible by parallel.tp (", P, "): attention is split by heads");
  MT_REQUIRE(cfg.ffn_hidden % P == 0, ConfigError, "model.ffn_hidden (", cfg.ffn_hidden,
             ") must be divisible by parallel.tp (", P, "): the MLP is split by hidden channels");
  MT_REQUIRE(
      cfg.n_kv_heads % P == 0 || P % cfg.n_kv_heads == 0, ConfigError, "model.n_kv_heads (", cfg.n_kv_heads,
      ") and parallel.tp (", P,
      "): one must divide the other (kv heads are split over tp, or each replicated on tp / n_kv_heads "
      "ranks)");
  TpDims d;
  d.heads = cfg.n_heads / P;
  if (cfg.n_kv_heads >= P) {
    d.kv_heads = cfg.n_kv_heads / P;
    d.kv_head0 = t * d.kv_heads;
  } else {
    d.kv_replicas = P / cfg.n_kv_heads;
    d.kv_heads = 1;
    d.kv_head0 = t / d.kv_replicas;  // the kv head of this rank's query heads
  }
  d.ffn = cfg.ffn_hidden / P;
  const tp::VocabShard vs = tp::vocab_shard(cfg.vocab_size, tp.size, tp.rank);
  d.vocab_rows = vs.rows;
  d.vocab_begin = vs.begin;
  d.vocab_end = vs.end;
  return d;
}

namespace {
// Global flat index of local element i (in [0, numel)); -1 for padding.
int64_t global_index(const ParamSpec& s, int64_t i) {
  if (s.map == ShardMap::whole) return i;
  const int64_t cols = s.shape.size() > 1 ? s.shape[1] : 1;
  const int64_t gcols = s.global_shape.size() > 1 ? s.global_shape[1] : 1;
  const int64_t r = i / cols, c = i % cols;
  if (s.map == ShardMap::rows) return r < s.count ? (s.first + r) * gcols + c : -1;
  return r * gcols + s.first + c;
}

// Calls f(local_begin, global_begin, n) for each run of consecutive local
// elements that is also consecutive in the full tensor (padding skipped).
template <class F>
void for_each_run(const ParamSpec& s, int64_t first, int64_t n, F&& f) {
  const int64_t cols = s.shape.size() > 1 ? s.shape[1] : 1;
  const int64_t run = s.map == ShardMap::cols ? cols : s.numel;  // a row, or everything
  for (int64_t i = first; i < first + n;) {
    const int64_t end = std::min(first + n, (i / run + 1) * run);
    if (s.map == ShardMap::rows) {
      const int64_t real_end = std::min(end, s.count * cols);
      if (i < real_end) f(i, global_index(s, i), real_end - i);
    } else {
      f(i, global_index(s, i), end - i);
    }
    i = end;
  }
}
}  // namespace

void param_to_local(const ParamSpec& s, const float* full, float* local) {
  std::memset(local, 0, sizeof(float) * static_cast<size_t>(s.numel));
  for_each_run(s, 0, s.numel, [&](int64_t li, int64_t gi, int64_t n) {
    std::memcpy(local + li, full + gi, sizeof(float) * static_cast<size_t>(n));
  });
}

void param_to_full(const ParamSpec& s, const float* local, float* full) {
  for_each_run(s, 0, s.numel, [&](int64_t li, int64_t gi, int64_t n) {
    std::memcpy(full + gi, local + li, sizeof(float) * static_cast<size_t>(n));
  });
}

const ParamSpec& ParamTable::find(const std::string& name) const {
  for (const auto& s : specs) {
    if (s.name == name) return s;
  }
  std::string some;
  for (size_t i = 0; i < specs.size() && i < 4; ++i)
    some += (i ? ", " : "") + specs[i].name;
  MT_THROW(ConfigError, "no parameter named '", name, "' (parameters include ", some, ", ...)");
}

ParamTable make_param_table(const ModelConfig& cfg, TpRank tp, StageRange stage) {
  ParamTable t;
  if (stage.end_layer < 0) stage.end_layer = cfg.n_layers;
  MT_REQUIRE(
      stage.first_layer >= 0 && stage.first_layer <= stage.end_layer && stage.end_layer <= cfg.n_layers,
      ConfigError, "stage layers [", stage.first_layer, ", ", stage.end_layer, ") are outside the model's ",
      cfg.n_layers, " layers");
  t.stage = stage;
  // A new unit starts at the next parameter added.
  auto begin_unit = [&](std::string name) {
    UnitSpec u;
    u.name = std::move(name);
    u.begin = u.end = t.total;
    t.units.push_back(std::move(u));
    return static_cast<int>(t.units.size()) - 1;
  };
  const TpDims d = tp_dims(cfg, tp);
  const int64_t C = cfg.d_model, F = cfg.ffn_hidden, V = cfg.vocab_size, D = cfg.head_dim();
  // One parameter: its full shape, and the piece of it this rank holds.
  auto add = [&](std::string name, std::vector<int64_t> full, ParamInit init, bool decay, ShardMap map,
                 int64_t first, int64_t count, int64_t local_extent) {
    ParamSpec s;
    s.name = std::move(name);
    s.global_shape = full;
    s.shape = std::move(full);
    s.map = map;
    s.first = first;
    s.count = count;
    if (map == ShardMap::rows) s.shape[0] = local_extent;
    if (map == ShardMap::cols) s.shape[1] = local_extent;
    s.offset = t.total;
    s.numel = 1;
    for (int64_t x : s.shape)
      s.numel *= x;
    s.init = init;
    s.weight_decay = decay;
    s.norm_counted = map != ShardMap::whole || tp.rank == 0;
    t.total += s.numel;
    UnitSpec& u = t.units.back();
    u.end = t.total;
    u.params.push_back({s.name, s.offset, s.shape[0], s.numel / s.shape[0], s.weight_decay, s.norm_counted});
    t.specs.push_back(std::move(s));
    return t.specs.back().offset;
  };
  // Later changes to a spec's norm_counted must reach its unit's slot too.
  auto set_norm_counted = [&](bool counted) {
    t.specs.back().norm_counted = counted;
    t.units.back().params.back().norm_counted = counted;
  };
  const bool split = tp.size > 1;
  auto whole = [&](std::string name, std::vector<int64_t> full, ParamInit init, bool decay) {
    return add(std::move(name), std::move(full), init, decay, ShardMap::whole, 0, 0, 0);
  };
  auto rows = [&](std::string name, std::vector<int64_t> full, ParamInit init, bool decay, int64_t first,
                  int64_t count, int64_t local_rows) {
    if (!split) return whole(std::move(name), std::move(full), init, decay);
    return add(std::move(name), std::move(full), init, decay, ShardMap::rows, first, count, local_rows);
  };
  auto cols = [&](std::string name, std::vector<int64_t> full, ParamInit init, bool decay, int64_t first,
                  int64_t count) {
    if (!split) return whole(std::move(name), std::move(full), init, decay);
    return add(std::move(name), std::move(full), init, decay, ShardMap::cols, first, count, count);
  };
  const int64_t Ql = d.heads * D, KVl = d.kv_heads * D, q0 = tp.rank * Ql, kv0 = d.kv_head0 * D;
  const int64_t Fl = d.ffn, f0 = tp.rank * Fl;
  const int64_t vreal = d.vocab_end - d.vocab_begin;
  if (stage.embed) {
    t.embed_unit = begin_unit("embed");
    t.embed = rows("model.embed_tokens.weight", {V, C}, ParamInit::normal, false, d.vocab_begin, vreal,
                   d.vocab_rows);
  }
  t.first_layer_unit = static_cast<int>(t.units.size());
  for (int64_t l = stage.first_layer; l < stage.end_layer; ++l) {
    begin_unit("layer " + std::to_string(l));
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerParamOffsets o{};
    o.ln1 = whole(p + "input_layernorm.weight", {C}, ParamInit::ones, false);
    o.qkv = rows(p + "self_attn.q_proj.weight", {cfg.q_dim(), C}, ParamInit::normal, true, q0, Ql, Ql);
    for (const char* kv : {"self_attn.k_proj.weight", "self_attn.v_proj.weight"}) {
      rows(p + kv, {cfg.kv_dim(), C}, ParamInit::normal, true, kv0, KVl, KVl);
      // A kv head replicated on kv_replicas ranks is counted once, by the first.
      if (d.kv_replicas > 1) set_norm_counted(tp.rank % d.kv_replicas == 0);
    }
    o.o = cols(p + "self_attn.o_proj.weight", {C, cfg.q_dim()}, ParamInit::residual_out, true, q0, Ql);
    o.ln2 = whole(p + "post_attention_layernorm.weight", {C}, ParamInit::ones, false);
    o.gate_up = rows(p + "mlp.gate_proj.weight", {F, C}, ParamInit::normal, true, f0, Fl, Fl);
    rows(p + "mlp.up_proj.weight", {F, C}, ParamInit::normal, true, f0, Fl, Fl);
    o.down = cols(p + "mlp.down_proj.weight", {C, F}, ParamInit::residual_out, true, f0, Fl);
    t.layers.push_back(o);
  }
  if (!stage.head) return t;
  t.final_unit = begin_unit("final");
  t.norm = whole("model.norm.weight", {C}, ParamInit::ones, false);
  if (!cfg.tie_embeddings) {
    t.lm_head = rows("lm_head.weight", {V, C}, ParamInit::normal, true, d.vocab_begin, vreal, d.vocab_rows);
  } else if (stage.embed) {
    t.lm_head = t.embed;
  } else {  // the last pipeline stage's copy of the first stage's embedding
    t.lm_head = rows("model.embed_tokens.weight", {V, C}, ParamInit::normal, false, d.vocab_begin, vreal,
                     d.vocab_rows);
    t.specs.back().tied_copy = true;
    set_norm_counted(false);  // the first stage counts it
  }
  return t;
}

void init_param_slice(const ParamSpec& s, const ModelConfig& cfg, uint64_t seed, int64_t first, int64_t n,
                      float* out) {
  const double residual_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(cfg.n_layers));
  std::memset(out, 0, sizeof(float) * static_cast<size_t>(n));  // padding stays zero
  for_each_run(s, first, n, [&](int64_t li, int64_t gi, int64_t len) {
    float* o = out + (li - first);
    switch (s.init) {
      case ParamInit::ones:
        std::fill(o, o + len, 1.0f);
        break;
      case ParamInit::normal:
        fill_normal(o, len, philox_key(seed, s.name), static_cast<uint64_t>(gi),
                    static_cast<float>(cfg.init_std));
        break;
      case ParamInit::residual_out:
        fill_normal(o, len, philox_key(seed, s.name), static_cast<uint64_t>(gi),
                    static_cast<float>(cfg.init_std * residual_scale));
        break;
    }
  });
}

void init_params(float* params, const ParamTable& table, const ModelConfig& cfg, uint64_t seed) {
  for (const auto& s : table.specs)
    init_param_slice(s, cfg, seed, 0, s.numel, params + s.offset);
}

std::vector<UnitSpec> make_units(const ParamTable& table, const ModelConfig& /*cfg*/) {
  return table.units;
}

}  // namespace mt

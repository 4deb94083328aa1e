#include "model/params.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/checked.h"
#include "core/error.h"
#include "core/philox.h"
#include "parallel/vocab_parallel.h"

namespace mt {

TpDims tp_dims(const ModelConfig& cfg, TpRank tp) {
  const int64_t P = tp.size, t = tp.rank;
  tp::check_tp_rank(static_cast<int>(P), static_cast<int>(t));
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

TpDims tp_dims(const ModelConfig& cfg, TpRank tp, const tp::Grid& grid) {
  if (!tp::on_grid(grid)) return tp_dims(cfg, tp);
  const int64_t P = tp.size;
  const tp::GridPlace at =
      tp::grid_place(grid, tp.size, tp.rank, cfg.n_heads, cfg.n_kv_heads, cfg.ffn_hidden);
  TpDims d;
  d.heads = cfg.n_heads / P;
  d.kv_heads = cfg.n_kv_heads / P;
  d.kv_head0 = at.block * d.kv_heads;  // heads: block c over tp_c, then block r of it
  d.ffn = cfg.ffn_hidden / P;
  const tp::VocabShard vs =
      tp::vocab_shard(cfg.vocab_size, static_cast<int>(grid.cols), static_cast<int>(at.col));
  d.vocab_rows = vs.rows;
  d.vocab_begin = vs.begin;
  d.vocab_end = vs.end;
  return d;
}

namespace {
template <class F>
void for_each_run(const ParamSpec& s, int64_t first, int64_t n, F&& f) {
  tp::TpSlice slice{s.map, s.first, s.count, 0, 1};
  slice.col_first = s.col_first;
  slice.col_count = s.col_count;
  const int64_t cols = s.shape.size() > 1 ? s.shape[1] : 1;
  const int64_t gcols = s.global_shape.size() > 1 ? s.global_shape[1] : 1;
  tp::for_each_run(slice, cols, gcols, s.numel, first, n, std::forward<F>(f));
}
}  // namespace

const ParamSpec& ParamTable::find(const std::string& name) const {
  for (const auto& s : specs) {
    if (s.name == name) return s;
  }
  std::string some;
  for (size_t i = 0; i < specs.size() && i < 4; ++i)
    some += (i ? ", " : "") + specs[i].name;
  MT_THROW(ConfigError, "no parameter named '", name, "' (parameters include ", some, ", ...)");
}

namespace {

// One parameter at `offset`: its full shape, and the piece of it this rank
// holds, cut by its row of the plan (on a grid, by its split over both sub-axes). Of the
// ranks holding the same piece, the first counts it in the gradient norm.
ParamSpec make_spec(std::string name, std::vector<int64_t> full, ParamInit init, bool decay, TpRank tp,
                    const tp::Grid& grid, int64_t head_dim, int64_t offset) {
  ParamSpec s;
  s.name = std::move(name);
  checked_numel(full, ("tensor " + s.name).c_str());  // a vocabulary of 2^58 must not wrap around
  s.role = tp::plan_row(s.name).role;
  const tp::TpSlice slice = tp::piece(s.role, full, tp.size, tp.rank, grid, head_dim);
  s.shape = slice.local_shape(full);
  s.global_shape = std::move(full);
  s.map = slice.map;
  s.first = slice.first;
  s.count = slice.count;
  s.col_first = slice.col_first;
  s.col_count = slice.col_count;
  s.norm_counted = tp.rank % slice.holders == 0;
  s.layout = tp::piece_layout(s.role, s.global_shape, tp.size, grid, slice.holders);
  s.stored_layout = s.grad_layout = s.state_layout = s.layout;  // until a store shards them
  s.offset = offset;
  s.numel = checked_numel(s.shape, ("tensor " + s.name).c_str());
  s.init = init;
  s.weight_decay = decay;
  return s;
}

// Each unit's slots, derived from the finished specs.
void add_unit_slots(ParamTable& t) {
  for (UnitSpec& u : t.units) {
    for (const ParamSpec& s : t.specs) {
      if (s.offset >= u.begin && s.offset < u.end) u.params.push_back(param_slot(s));
    }
  }
}

// Under expert parallelism the last three specs (an expert's w1, w3, w2) are
// held only by the ranks of this ep coordinate (Layout::expert_coord).
void mark_expert(std::vector<ParamSpec>& specs, EpRank ep) {
  if (ep.size == 1) return;
  for (size_t i = specs.size() - 3; i < specs.size(); ++i) {
    ParamSpec& s = specs[i];
    s.expert = true;
    s.layout.ep = ep.size;
    s.layout.expert_coord = ep.rank;
    s.layout.ep_cp_size = ep.cp_size;
    s.stored_layout = s.grad_layout = s.state_layout = s.layout;
  }
}

}  // namespace

ParamTable make_param_table(const ModelConfig& cfg, TpRank tp, StageRange stage, EpRank ep,
                            const tp::Grid& grid) {
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
  tp_dims(cfg, tp, grid);  // the model's tp rules, with the numbers, before any slicing
  const int64_t C = cfg.d_model, F = cfg.ffn_hidden, V = cfg.vocab_size;
  auto add = [&](std::string name, std::vector<int64_t> full, ParamInit init, bool decay) {
    t.specs.push_back(
        make_spec(std::move(name), std::move(full), init, decay, tp, grid, cfg.head_dim(), t.total));
    t.total = checked_add(t.total, t.specs.back().numel, "the model's parameters");
    t.units.back().end = t.total;
    return t.specs.back().offset;
  };
  if (stage.embed) {
    t.embed_unit = begin_unit("embed");
    t.embed = add("model.embed_tokens.weight", {V, C}, ParamInit::normal, false);
  }
  t.first_layer_unit = static_cast<int>(t.units.size());
  for (int64_t l = stage.first_layer; l < stage.end_layer; ++l) {
    begin_unit("layer " + std::to_string(l));
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LayerParamOffsets o{};
    o.ln1 = add(p + "input_layernorm.weight", {C}, ParamInit::ones, false);
    o.qkv = add(p + "self_attn.q_proj.weight", {cfg.q_dim(), C}, ParamInit::normal, true);
    add(p + "self_attn.k_proj.weight", {cfg.kv_dim(), C}, ParamInit::normal, true);
    add(p + "self_attn.v_proj.weight", {cfg.kv_dim(), C}, ParamInit::normal, true);
    o.o = add(p + "self_attn.o_proj.weight", {C, cfg.q_dim()}, ParamInit::residual_out, true);
    o.ln2 = add(p + "post_attention_layernorm.weight", {C}, ParamInit::ones, false);
    if (cfg.is_moe_layer(l)) {
      // This rank's experts, named by global index: initial values independent of the rank.
      const int64_t I = cfg.expert_hidden(), El = cfg.n_experts / ep.size;
      o.gate_up = o.down = -1;
      o.router = add(p + "block_sparse_moe.gate.weight", {cfg.n_experts, C}, ParamInit::normal, true);
      o.experts = t.total;
      for (int64_t e = ep.rank * El; e < (ep.rank + 1) * El; ++e) {
        const std::string x = p + "block_sparse_moe.experts." + std::to_string(e) + ".";
        add(x + "w1.weight", {I, C}, ParamInit::normal, true);
        add(x + "w3.weight", {I, C}, ParamInit::normal, true);
        add(x + "w2.weight", {C, I}, ParamInit::residual_out, true);
        mark_expert(t.specs, ep);
      }
    } else {
      o.gate_up = add(p + "mlp.gate_proj.weight", {F, C}, ParamInit::normal, true);
      add(p + "mlp.up_proj.weight", {F, C}, ParamInit::normal, true);
      o.down = add(p + "mlp.down_proj.weight", {C, F}, ParamInit::residual_out, true);
    }
    t.layers.push_back(o);
  }
  if (stage.head) {
    t.final_unit = begin_unit("final");
    t.norm = add("model.norm.weight", {C}, ParamInit::ones, false);
    if (!cfg.tie_embeddings) {
      t.lm_head = add("lm_head.weight", {V, C}, ParamInit::normal, true);
    } else if (stage.embed) {
      t.lm_head = t.embed;
    } else {  // the last pipeline stage's copy of the first stage's embedding
      t.lm_head = add("model.embed_tokens.weight", {V, C}, ParamInit::normal, false);
      t.specs.back().tied_copy = true;
      t.specs.back().norm_counted = false;  // the first stage counts it
    }
  }
  add_unit_slots(t);
  return t;
}

void set_state_layouts(ParamTable& table, const StoreSharding& sh) {
  for (ParamSpec& s : table.specs) {
    s.stored_layout = s.grad_layout = s.state_layout = s.layout;
    if (sh.group == 0 || sh.zero == 0) continue;
    Layout sharded = zero_layout(s.layout, sh.group, sh.dp_shard);
    // An expert is sharded over its replica group only: flattened (dp, cp)
    // ranks c·ep … c·ep + ep − 1 hold piece c (docs/PARALLELISM.md "Expert parallelism").
    if (s.layout.expert_coord >= 0) sharded.replicas[static_cast<size_t>(axis_index(Axis::dp))] = s.layout.ep;
    s.state_layout = sharded;
    if (sh.zero >= 2) s.grad_layout = sharded;
    if (sh.zero >= 3) s.stored_layout = sharded;
  }
}

ParamSlot param_slot(const ParamSpec& s) {
  return {s.name, s.offset, s.shape[0], s.numel / s.shape[0], s.weight_decay, s.norm_counted, s.expert};
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

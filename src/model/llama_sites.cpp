// The model's sites as the linear plan sees them (parallel/linear_plan.h):
// each linear site's weights with the role the data flow is written for and
// this rank's widths, and the plan built from them, once, at construction.
#include <string>

#include "model/llama_internal.h"
#include "parallel/linear_plan.h"
#include "parallel/tp_plan.h"

namespace mt {

namespace {

tp::ModelSite site(std::string_view name, tp::SiteUse use, std::vector<tp::SiteWeight> weights,
                   int64_t in = 0, std::vector<int64_t> out = {}, tp::VocabShard vocab = {}) {
  return {name, use, std::move(weights), in, std::move(out), vocab};
}

}  // namespace

// In the order of Site.
std::vector<tp::ModelSite> Llama::model_sites() const {
  using tp::Role;
  using tp::SiteUse;
  const int64_t C = cfg_.d_model, D = cfg_.head_dim(), Q = td_.heads * D, KV = td_.kv_heads * D, F = td_.ffn;
  const tp::VocabShard vocab{td_.vocab_begin, td_.vocab_end, td_.vocab_rows};
  const Role col = Role::column, rep = Role::replicated;
  std::vector<tp::ModelSite> sites = {
      site("attn qkv", SiteUse::linear,
           {{"self_attn.q_proj.weight", col},
            {"self_attn.k_proj.weight", Role::kv_replicated},
            {"self_attn.v_proj.weight", Role::kv_replicated}},
           C, {Q, KV, KV}),
      site("attn o", SiteUse::linear, {{"self_attn.o_proj.weight", Role::row}}, Q, {C}),
      site("mlp gate_up", SiteUse::linear, {{"mlp.gate_proj.weight", col}, {"mlp.up_proj.weight", col}}, C,
           {F, F}),
      site("mlp down", SiteUse::linear, {{"mlp.down_proj.weight", Role::row}}, F, {C}),
      site("embed", SiteUse::embedding, {{"model.embed_tokens.weight", Role::vocab}}, C, {}, vocab),
      site("head", SiteUse::head, {{"lm_head.weight", Role::vocab}}, C, {td_.vocab_rows}),
      site("norms", SiteUse::norm,
           {{"input_layernorm.weight", rep}, {"post_attention_layernorm.weight", rep}}),
      site("final norm", SiteUse::norm, {{"model.norm.weight", rep}}),
      site("moe router", SiteUse::local, {{"block_sparse_moe.gate.weight", rep}}),
      site("moe experts", SiteUse::local, {{"w1.weight", rep}, {"w3.weight", rep}, {"w2.weight", rep}}),
  };
  if (kv_slots_)  // the canonical mode's kv slots (parallel/canonical_tp_kv.h)
    sites.front().kv_slots = {kv_att_, td_.kv_heads, td_.kv_head0, D, cfg_.n_kv_heads};
  return sites;
}

void Llama::make_plan(Group* kv) {
  const tp::TpGroups groups{
      tp_group(),
      opts_.sp,
      opts_.tp_overlap,
      tp_group() ? opts_.grid : tp::Grid{},
      opts_.mesh.tp_r,
      opts_.mesh.tp_c,
      kv,
      opts_.canonical_tp,
      opts_.canonical_cp > 1 ? opts_.canonical_cp / (cp_group() ? cp_group()->size() : 1) : 0,
      opts_.canonical_tp_d};
  plan_ = tp::LinearPlan(opts_.plan ? *opts_.plan : tp::llama_plan(), model_sites(), groups, cfg_.d_model);
  for (int64_t l = 0; l < n_stage_layers_; ++l) {
    const std::string at = "layer " + std::to_string(table_.stage.first_layer + l) + " ";
    auto label = [&](Site s) { return at + std::string(plan_.entry(s).site); };
    labels_.push_back({label(kQkv), at + std::string(plan_.entry(kQkv).kv_site), label(kO), label(kGateUp),
                       label(kDown), label(kNorms), label(kRouter)});
  }
}

}  // namespace mt

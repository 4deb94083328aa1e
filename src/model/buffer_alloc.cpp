// The model's buffers allocated from the buffer plan (model/buffer_plan.h):
// each entry becomes the member it names, so that the plan is the only place
// a size is stated. A name no member answers to is a defect of the plan.
#include <string_view>
#include <utility>

#include "core/error.h"
#include "model/llama_internal.h"

namespace mt {

namespace {

template <class S, size_t K>
Tensor& named(S& s, const std::pair<std::string_view, Tensor S::*> (&table)[K], std::string_view name,
              const char* what) {
  for (const auto& [n, m] : table)
    if (n == name) return s.*m;
  MT_CHECK(false, "the buffer plan names ", what, " member '", name, "', which ", what, " does not have");
  return s.*table[0].second;
}

Tensor& moe_member(MoeActs& a, std::string_view name) {
  static const std::pair<std::string_view, Tensor MoeActs::*> table[] = {
      {"probs", &MoeActs::probs}, {"lse", &MoeActs::lse}, {"weights", &MoeActs::weights},
      {"xs", &MoeActs::xs},       {"xl", &MoeActs::xl},   {"gu", &MoeActs::gu},
      {"h", &MoeActs::h},         {"yk", &MoeActs::yk}};
  return named(a, table, name, "MoeActs");
}

}  // namespace

Tensor& Llama::LayerActs::member(const char* name) {
  using A = LayerActs;
  static const std::pair<std::string_view, Tensor A::*> table[] = {
      {"ln1", &A::ln1},           {"ln1_full", &A::ln1_full}, {"rstd1", &A::rstd1},    {"qkv", &A::qkv},
      {"att", &A::att},           {"lse", &A::lse},           {"mid", &A::mid},        {"ln2", &A::ln2},
      {"ln2_full", &A::ln2_full}, {"rstd2", &A::rstd2},       {"gu", &A::gu},          {"h", &A::h},
      {"att_full", &A::att_full}, {"h_full", &A::h_full},     {"w_down", &A::w_down},  {"w_gu", &A::w_gu},
      {"w_o", &A::w_o},           {"w_qkv", &A::w_qkv},       {"w_norms", &A::w_norms}};
  const std::string_view n(name);
  if (n.starts_with("moe.")) return moe_member(moe, n.substr(4));
  return named(*this, table, n, "LayerActs");
}

Llama::LayerActs::LayerActs(const buffers::List& plan) {
  for (const buffers::Entry& e : plan)
    member(e.name) = Tensor(e.shape.vec(), e.kind);
  // The chosen experts [N, k]: indices beside the router's weights (not a buffer of the plan: on the
  // host device a plain host array, as before the seam).
  if (moe.weights.numel() > 0) moe.experts.assign(moe.weights.numel(), MemKind::activation);
}

Tensor& Llama::Slot::member(const char* name) {
  using S = Slot;
  static const std::pair<std::string_view, Tensor S::*> table[] = {
      {"lnf", &S::lnf},       {"rstdf", &S::rstdf},   {"lnf_full", &S::lnf_full}, {"logits", &S::logits},
      {"losses", &S::losses}, {"lse_ce", &S::lse_ce}, {"w_lnf", &S::w_lnf},       {"w_embed", &S::w_embed}};
  return named(*this, table, name, "Slot");
}

Llama::Slot::Slot(const buffers::ChunkPlan& plan) {
  for (const buffers::Entry& e : plan.resid)
    resid.emplace_back(e.shape.vec(), e.kind);
  if (!plan.recomputation) {
    layers.reserve(static_cast<size_t>(plan.layers()));
    for (int64_t l = 0; l < plan.layers(); ++l)
      layers.emplace_back(plan.layer(l));
  }
  for (const buffers::Entry& e : plan.head)
    member(e.name) = Tensor(e.shape.vec(), e.kind);
}

Tensor& Llama::Buffers::member(const char* name) {
  using B = Buffers;
  static const std::pair<std::string_view, Tensor B::*> table[] = {
      {"norm_out", &B::norm_out}, {"dres", &B::dres},         {"dtmp", &B::dtmp},
      {"dmid", &B::dmid},         {"dqkv", &B::dqkv},         {"dgu", &B::dgu},
      {"part", &B::part},         {"dfull", &B::dfull},       {"dln", &B::dln},
      {"normg", &B::normg},       {"kvg", &B::kvg},           {"rlogits", &B::rlogits},
      {"drlogits", &B::drlogits}, {"dweights", &B::dweights}, {"dyk", &B::dyk},
      {"dys", &B::dys},           {"dxs", &B::dxs},           {"dgu_e", &B::dgu_e},
      {"dh_e", &B::dh_e},         {"xfer", &B::xfer},         {"moeg", &B::moeg},
      {"grid", &B::grid},         {"leaves", &B::leaves},     {"nshards", &B::nshards},
      {"cpwg", &B::cpwg},         {"pieces2d", &B::pieces2d}};
  return named(*this, table, name, "Buffers");
}

void Llama::Buffers::allocate(const buffers::List& list) {
  for (const buffers::Entry& e : list)
    member(e.name) = Tensor(e.shape.vec(), e.kind);
}

}  // namespace mt

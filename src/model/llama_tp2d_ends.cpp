// The rest of the model under 2-D tensor parallelism on an R × C grid
// (docs/PARALLELISM.md "2-D tensor parallelism"; the decoder blocks are
// llama_tp2d.cpp): its buffers, the step's forward and backward, the
// embedding and the LM head with the loss. The embedding and the head hold
// [ceil(V/C), d/R]: vocabulary rows over tp_c, d over tp_r (one block serves
// both when tied).
//
//   embedding  local lookup [N, d/R], Partial over tp_c → reduce-scatter over
//              tp_c to [N, d/(RC)]. Backward: all-gather over tp_c, then each
//              rank adds into its own rows.
//   head       all-gather over tp_c of the final norm [N, d/(RC)] → [N, d/R];
//              local logits [N, ceil(V/C)], Partial over tp_r → all-reduce
//              over tp_r (reduce_from_tp); the vocab-parallel cross-entropy
//              over tp_c. Backward: dW local; dx [N, d/R], Partial over tp_c
//              → reduce-scatter over tp_c.
#include <algorithm>
#include <string>

#include "core/error.h"
#include "model/llama_internal.h"
#include "ops/gemm.h"
#include "parallel/tp2d.h"
#include "parallel/tp2d_linear.h"
#include "parallel/tp_comm.h"
#include "parallel/tp_plan.h"
#include "parallel/vocab_parallel.h"

namespace mt {

void Llama::init_tp2d() {
  const tp2d::Grid& g = opts_.grid;
  MT_REQUIRE(opts_.tp_r != nullptr && opts_.tp_c != nullptr && opts_.tp_r->size() == g.rows &&
                 opts_.tp_c->size() == g.cols,
             ConfigError, "2-D tensor parallelism on a ", g.rows, " x ", g.cols,
             " grid needs its sub-axis groups: tp_r of ", g.rows, " and tp_c of ", g.cols,
             " ranks (ModelOptions::tp_r, tp_c, from tp2d::sub_axes)");
  // The start-up rules of 2-D tp, Config::validate's: a stage without both
  // ends is one of several pipeline stages.
  tp2d::check(g, {sp_on(), cp_ != nullptr ? cp_->size() : 1, has_embed() && has_head() ? 1 : 2, cfg_.moe(),
                  cfg_.attention_dropout > 0 || cfg_.hidden_dropout > 0, cfg_.n_kv_heads, cfg_.n_heads,
                  cfg_.ffn_hidden, opts_.tp_overlap});
  Buffers& b = *buf_;  // sized by the buffer plan (model/buffer_plan.h)
  if (opts_.recompute) b.recompute.push_back(layer_acts_2d());
  b.allocate(b.plan.shared);
  moe_init();
  slot(0);
}

Llama::LayerActs Llama::layer_acts_2d() const {
  return LayerActs(buf_->plan.recompute);  // the one set recomputation reuses (slots: Slot's own)
}

std::unique_ptr<Llama::Slot> Llama::make_slot_2d() const {
  return std::make_unique<Slot>(buf_->plan);
}

double Llama::forward_2d(Slot& sl) {
  embed_forward_2d(sl);
  for (int64_t i = 0; i < n_stage_layers_; ++i) {
    const int unit = layer_unit(i);
    const float* P = store_->acquire_params(unit, Pass::forward);
    layer_forward_2d(i, P, acts_for(i), sl.resid[static_cast<size_t>(i)].data(),
                     sl.resid[static_cast<size_t>(i + 1)].data());
    store_->release_params(unit, Pass::forward);
  }
  return head_forward_2d(sl);
}

void Llama::backward_2d(float dloss) {
  Slot& sl = *cur_;
  float* Eg = head_backward_2d(sl, dloss);  // a tied head's gradient: the embedding unit's, still acquired
  layers_backward(sl);
  embed_backward_2d(sl, Eg);
  moe_after_backward(sl);
  sl.has_targets = false;
}

void Llama::embed_forward_2d(Slot& sl) {
  const Widths2d w(cfg_, td_, opts_.grid);
  const int64_t N = N_;
  const int eu = table_.embed_unit;
  const float* E = store_->acquire_params(eu, Pass::forward);
  {
    MT_TIMED(Kernel::embedding);
    const tp::VocabShard vs{td_.vocab_begin, td_.vocab_end, td_.vocab_rows};
    float* partial = buf_->grid.data();  // [N, d/R], Partial over tp_c
    tp::vocab_lookup(partial, sl.inputs.data(), E + (table_.embed - units_[static_cast<size_t>(eu)].begin), N,
                     w.dR, cfg_.vocab_size, vs);
    const std::string_view site = tp::plan_row("model.embed_tokens.weight").site;
    tp2d::scatter_features(sl.resid[0].data(), partial + N * w.dR, partial, N, w.dR, {}, *opts_.tp_c,
                           tp::comm_label(site, "scatter_features", "forward", {N, w.dR}));
  }
  store_->release_params(eu, Pass::forward);
}

void Llama::embed_backward_2d(Slot& sl, float* Eg) {
  const Widths2d w(cfg_, td_, opts_.grid);
  const int64_t N = N_;
  const int eu = table_.embed_unit;
  if (Eg == nullptr) Eg = store_->acquire_grads(eu);
  {
    MT_TIMED(Kernel::embedding);
    const tp::VocabShard vs{td_.vocab_begin, td_.vocab_end, td_.vocab_rows};
    float* full = buf_->grid.data();  // [N, d/R]: every tp_c rank's gradient of its features
    const std::string_view site = tp::plan_row("model.embed_tokens.weight").site;
    tp2d::gather_features(full, full + N * w.dR, buf_->dres.data(), N, w.dR, {}, *opts_.tp_c,
                          tp::comm_label(site, "scatter_features", "backward", {N, w.dl}));
    tp::vocab_lookup_backward(Eg + (table_.embed - units_[static_cast<size_t>(eu)].begin), full,
                              sl.inputs.data(), N, w.dR, cfg_.vocab_size, vs);
  }
  store_->release_grads(eu);
}

double Llama::head_forward_2d(Slot& sl) {
  const Widths2d w(cfg_, td_, opts_.grid);
  const int64_t N = N_;
  const int fu = table_.final_unit;
  const float* Fp = store_->acquire_params(fu, Pass::forward);
  const float* head = head_unit_ == fu ? Fp : store_->acquire_params(head_unit_, Pass::forward);
  {
    MT_TIMED(Kernel::rmsnorm);
    tp2d::rmsnorm2d_forward(sl.lnf.data(), sl.rstdf.data(), sl.resid.back().data(), Fp + norm_rel_, N, w.dl,
                            cfg_.d_model, static_cast<float>(cfg_.norm_eps), *tp_,
                            tp::plan_row("model.norm.weight").site);
  }
  const std::string_view site = tp::plan_row("lm_head.weight").site;
  {
    MT_TIMED(Kernel::gemm);
    tp2d::gather_features(sl.lnf_full.data(), buf_->grid.data(), sl.lnf.data(), N, w.dR, {}, *opts_.tp_c,
                          tp::comm_label(site, "gather_features", "forward", {N, w.dl}));
    linear_forward(sl.logits.data(), sl.lnf_full.data(), head + head_rel_, N, w.dR, w.Vl);
    tp::reduce_from_tp_forward(sl.logits.data(), N, w.Vl, *opts_.tp_r, site);
  }
  if (head_unit_ != fu) store_->release_params(head_unit_, Pass::forward);
  store_->release_params(fu, Pass::forward);
  if (!sl.has_targets) return 0.0;
  MT_TIMED(Kernel::cross_entropy);
  tp::vocab_cross_entropy_forward(sl.losses.data(), sl.lse_ce.data(), sl.logits.data(), sl.targets.data(), N,
                                  cfg_.vocab_size, kIgnoreIndex, *opts_.tp_c, site);
  double sum = 0.0;  // in token order: deterministic (and the same on every tp rank)
  for (int64_t i = 0; i < N; ++i)
    sum += sl.losses.data()[i];
  return sum;
}

float* Llama::head_backward_2d(Slot& sl, float dloss) {
  const Widths2d w(cfg_, td_, opts_.grid);
  const int64_t N = N_;
  const bool tied_here = head_unit_ == table_.embed_unit;
  MT_CHECK(sl.has_targets, "backward needs a forward with targets");
  const std::string_view site = tp::plan_row("lm_head.weight").site;
  {
    MT_TIMED(Kernel::cross_entropy);
    tp::vocab_cross_entropy_backward(sl.logits.data(), sl.logits.data(), sl.lse_ce.data(), sl.targets.data(),
                                     dloss, N, cfg_.vocab_size, kIgnoreIndex, *opts_.tp_c);
    tp::reduce_from_tp_backward(sl.logits.data(), N, w.Vl, *opts_.tp_r, site);  // identity
  }
  const int fu = table_.final_unit;
  const float* Fp = store_->acquire_params(fu, Pass::backward);
  float* Fg = store_->acquire_grads(fu);
  const float* head = tied_here ? store_->acquire_params(head_unit_, Pass::backward) : Fp;
  float* Eg = tied_here ? store_->acquire_grads(head_unit_) : nullptr;
  float* dpart = buf_->grid.data();  // [N, d/R], Partial over tp_c (the vocabulary shards)
  {
    MT_TIMED(Kernel::gemm);
    linear_backward(dpart, (tied_here ? Eg : Fg) + head_rel_, sl.logits.data(), sl.lnf_full.data(),
                    head + head_rel_, N, w.dR, w.Vl);
    tp2d::scatter_features(buf_->dln.data(), dpart + N * w.dR, dpart, N, w.dR, {}, *opts_.tp_c,
                           tp::comm_label(site, "gather_features", "backward", {N, w.dR}));
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    tp2d::rmsnorm2d_backward(buf_->dres.data(), Fg + norm_rel_, buf_->dln.data(), sl.resid.back().data(),
                             Fp + norm_rel_, sl.rstdf.data(), N, w.dl, cfg_.d_model, *tp_,
                             tp::plan_row("model.norm.weight").site);
  }
  if (tied_here) store_->release_params(head_unit_, Pass::backward);
  store_->release_grads(fu);
  store_->release_params(fu, Pass::backward);
  return Eg;
}

}  // namespace mt

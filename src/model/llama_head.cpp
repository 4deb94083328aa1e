// The last stage's end of the model: the final norm, the LM head and the
// cross-entropy, forward and backward, each through its entry of the linear
// plan (parallel/linear_plan.h: vocab-parallel over tp, or over the grid's
// sub-axes).
#include "core/error.h"
#include "model/llama_internal.h"
#include "parallel/linear_plan.h"

namespace mt {

// The last stage's head, forward: the final norm, the LM head and the loss of
// the slot's targets (their sum; 0 without targets).
double Llama::head_forward(Slot& sl) {
  const int64_t N = N_, Nl = Nl_, V = cfg_.vocab_size;
  const tp::LinearEntry& e = plan_.entry(kHead);
  const int fu = table_.final_unit;
  const float* Fp = store_->acquire_params(fu, Pass::forward);
  const float* head = head_unit_ == fu ? Fp : store_->acquire_params(head_unit_, Pass::forward);
  {
    MT_TIMED(Kernel::rmsnorm);
    plan_.norm_forward(sl.lnf.data(), sl.rstdf.data(), sl.resid.back().data(), Fp + norm_rel_, Nl,
                       static_cast<float>(cfg_.norm_eps), final_norm_site());
  }
  probe(cfg_.n_layers, "final_norm", false, sl.lnf.data(), ProbeRows::resid);
  {
    MT_TIMED(Kernel::gemm);
    plan_.head_forward(sl.logits.data(), sl.lnf_full.data(), sl.lnf.data(), head + head_rel_, N, e);
  }
  if (head_unit_ != fu) store_->release_params(head_unit_, Pass::forward);
  store_->release_params(fu, Pass::forward);
  if (!sl.has_targets) return 0.0;
  MT_TIMED(Kernel::cross_entropy);
  plan_.loss_forward(sl.losses.data(), sl.lse_ce.data(), sl.logits.data(), sl.d_targets.data(), N, V,
                     kIgnoreIndex, e);
  if (opts_.probe != nullptr)  // each token's loss: one column, the same on every tp rank
    opts_.probe->record(cfg_.n_layers, "loss", false, sl.losses.data(), N, 1,
                        {sl.seq_rows.data(), sl.pos.data(), sl.T}, {{0, 0, 1}});
  const HostView<float> losses(sl.losses.data(), N, "loss");
  double sum = 0.0;  // in token order: deterministic (and the same on every tp rank)
  for (int64_t i = 0; i < N; ++i)
    sum += losses[i];
  return sum;
}

// The last stage's head, backward: cross-entropy, the LM head and the final
// norm, leaving dL/d(stage output) in dres. Returns the embedding unit's
// gradient buffer when the head is tied to it on this stage (acquired here
// and released after the embedding's backward), else null. A store that
// keeps a tied head apart (the canonical mode, parallel/canonical_store.h)
// gets the head's gradient in a buffer of its own, released here.
float* Llama::head_backward(float dloss) {
  Slot& sl = *cur_;
  const int64_t N = N_, Nl = Nl_, V = cfg_.vocab_size, W = plan_.width();
  const tp::LinearEntry& e = plan_.entry(kHead);
  Buffers& b = *buf_;
  const bool tied_here = head_unit_ >= 0 && head_unit_ == table_.embed_unit;
  float* Eg = nullptr;
  MT_CHECK(sl.has_targets, "backward needs a forward with targets");
  {
    MT_TIMED(Kernel::cross_entropy);
    plan_.loss_backward(sl.logits.data(), sl.logits.data(), sl.lse_ce.data(), sl.d_targets.data(), dloss, N,
                        V, kIgnoreIndex, e);
  }
  const int fu = table_.final_unit;
  const float* Fp = store_->acquire_params(fu, Pass::backward);
  float* Fg = store_->acquire_grads(fu);
  const float* head = tied_here ? store_->acquire_params(head_unit_, Pass::backward) : Fp;
  const bool apart = tied_here && store_->keeps_tied_apart();
  if (tied_here) Eg = apart ? store_->acquire_tied_grads(head_unit_) : store_->acquire_grads(head_unit_);
  float* head_grad = tied_here ? Eg : Fg;
  float* dlnf = column_dinput_buffer();
  {
    MT_TIMED(Kernel::gemm);
    plan_.head_backward(dlnf, head_grad + head_rel_, sl.logits.data(),
                        plan_.gemm_input(sl.lnf.data(), sl.lnf_full.data(), e), head + head_rel_, N, e);
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    const tp::PartialGrads norm_grad = plan_.partial_grads(b.normg.data(), W);
    plan_.norm_backward(b.dres.data(), norm_grad.into(Fg + norm_rel_, 0), dlnf, sl.resid.back().data(),
                        Fp + norm_rel_, sl.rstdf.data(), Nl, final_norm_site());
    norm_grad.finish({{Fg + norm_rel_, W}}, final_norm_site(), "sp weight grads", {1, W});
  }
  probe(cfg_.n_layers, "in", true, b.dres.data(), ProbeRows::resid);
  if (tied_here) store_->release_params(head_unit_, Pass::backward);
  store_->release_grads(fu);
  store_->release_params(fu, Pass::backward);
  if (!apart) return Eg;
  store_->release_tied_grads(head_unit_);
  return nullptr;
}

}  // namespace mt

// The last stage's end of the model (1-D tensor parallelism or none; 2-D is
// llama_tp2d_ends.cpp): the final norm, the LM head (vocab-parallel under tp)
// and the cross-entropy, forward and backward.
#include "core/error.h"
#include "model/llama_internal.h"
#include "ops/cross_entropy.h"
#include "ops/rmsnorm.h"
#include "parallel/tp_comm.h"
#include "parallel/tp_plan.h"
#include "parallel/vocab_parallel.h"

namespace mt {

// The last stage's head, forward: the final norm, the LM head and the loss of
// the slot's targets (their sum; 0 without targets).
double Llama::head_forward(Slot& sl) {
  const int64_t N = N_, Nl = Nl_, C = cfg_.d_model, V = cfg_.vocab_size, Vl = td_.vocab_rows;
  const int fu = table_.final_unit;
  const float* Fp = store_->acquire_params(fu, Pass::forward);
  const float* head = head_unit_ == fu ? Fp : store_->acquire_params(head_unit_, Pass::forward);
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_forward(sl.lnf.data(), sl.rstdf.data(), sl.resid.back().data(), Fp + norm_rel_, Nl, C,
                    static_cast<float>(cfg_.norm_eps));
  }
  {
    MT_TIMED(Kernel::gemm);
    tp::column_parallel_forward(sl.logits.data(), sl.lnf_full.data(), sl.lnf.data(), head + head_rel_, N, C,
                                Vl, tp_layer(tp::plan_row("lm_head.weight").site));
  }
  if (head_unit_ != fu) store_->release_params(head_unit_, Pass::forward);
  store_->release_params(fu, Pass::forward);
  if (!sl.has_targets) return 0.0;
  MT_TIMED(Kernel::cross_entropy);
  const int32_t* tg = sl.targets.data();
  if (tp_)
    tp::vocab_cross_entropy_forward(sl.losses.data(), sl.lse_ce.data(), sl.logits.data(), tg, N, V,
                                    kIgnoreIndex, *tp_, tp::plan_row("lm_head.weight").site);
  else
    cross_entropy_forward(sl.losses.data(), sl.lse_ce.data(), sl.logits.data(), tg, N, V, kIgnoreIndex);
  double sum = 0.0;  // in token order: deterministic (and the same on every tp rank)
  for (int64_t i = 0; i < N; ++i)
    sum += sl.losses.data()[i];
  return sum;
}

// The last stage's head, backward: cross-entropy, the LM head (vocab-parallel
// under tp) and the final norm, leaving dL/d(stage output) in dres. Returns the
// embedding unit's gradient buffer when the head is tied to it on this stage
// (acquired here and released after the embedding's backward), else null.
float* Llama::head_backward(float dloss) {
  Slot& sl = *cur_;
  const int64_t N = N_, Nl = Nl_, C = cfg_.d_model, V = cfg_.vocab_size, Vl = td_.vocab_rows;
  Buffers& b = *buf_;
  const bool sp = sp_on();
  const bool tied_here = head_unit_ >= 0 && head_unit_ == table_.embed_unit;
  float* Eg = nullptr;
  MT_CHECK(sl.has_targets, "backward needs a forward with targets");
  {
    MT_TIMED(Kernel::cross_entropy);
    const int32_t* tg = sl.targets.data();
    if (tp_)
      tp::vocab_cross_entropy_backward(sl.logits.data(), sl.logits.data(), sl.lse_ce.data(), tg, dloss, N, V,
                                       kIgnoreIndex, *tp_);
    else
      cross_entropy_backward(sl.logits.data(), sl.logits.data(), sl.lse_ce.data(), tg, dloss, N, V,
                             kIgnoreIndex);
  }
  const int fu = table_.final_unit;
  const float* Fp = store_->acquire_params(fu, Pass::backward);
  float* Fg = store_->acquire_grads(fu);
  const float* head = tied_here ? store_->acquire_params(head_unit_, Pass::backward) : Fp;
  if (tied_here) Eg = store_->acquire_grads(head_unit_);
  float* head_grad = tied_here ? Eg : Fg;
  float* dlnf = column_dinput_buffer();
  {
    MT_TIMED(Kernel::gemm);
    tp::column_parallel_backward(dlnf, head_grad + head_rel_, b.part.data(), sl.logits.data(),
                                 sp ? sl.lnf_full.data() : sl.lnf.data(), head + head_rel_, N, C, Vl,
                                 tp_layer(tp::plan_row("lm_head.weight").site));
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    float* gnorm = sp ? b.normg.data() : Fg + norm_rel_;
    if (sp) b.normg.zero();
    rmsnorm_backward(b.dres.data(), gnorm, dlnf, sl.resid.back().data(), Fp + norm_rel_, sl.rstdf.data(), Nl,
                     C);
    if (sp) {
      tp_->all_reduce(
          gnorm, C,
          tp::comm_label(tp::plan_row("model.norm.weight").site, "sp weight grads", "backward", {1, C}));
      add_inplace(Fg + norm_rel_, gnorm, C);
    }
  }
  if (tied_here) store_->release_params(head_unit_, Pass::backward);
  store_->release_grads(fu);
  store_->release_params(fu, Pass::backward);
  return Eg;
}

}  // namespace mt

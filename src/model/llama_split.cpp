// The backward in two halves for the zero-bubble schedules (pipeline/stage.h):
// B computes the stage's input gradient, W its weight gradients, later. B
// runs layer_backward's kernels with every weight gradient skipped (the
// linear plan's dw = null) and keeps, in the slot, each linear layer's output
// gradient and the norms' weight gradients; W multiplies the kept output
// gradients by the slot's kept inputs. The fused path (layer_backward) is
// untouched, so the schedules that do not split keep their bits and speed.
//
// Bits: a weight gradient is the same GEMM (dW += dYᵀ·X, the same shapes and
// operands) at another time, and a norm's weight gradient, formed from zero
// in the slot and added to the store's buffer, is what the fused kernel adds
// to it; in the canonical mode that buffer is the microbatch's zeroed leaf,
// so 0 + g is g and the split is bitwise the fused backward.
#include <cstring>

#include "core/device.h"
#include "core/trace_spans.h"
#include "model/llama_internal.h"
#include "ops/swiglu.h"
#include "parallel/linear_plan.h"

namespace mt {

namespace {
void copy_floats(float* dst, const float* src, int64_t n) {
  copy_bytes(dst, src, n * int64_t{sizeof(float)});
}
}  // namespace

// The halves of layer_backward and of the head's backward, as functions of the
// model (its friend): llama.h declares only the two Stage overrides.
struct SplitBackward {
  static void layer_input(Llama& m, int64_t l, const float* P, Llama::LayerActs& a, const float* x_in,
                          float* dres);
  static void layer_weights(Llama& m, int64_t l, float* G, Llama::LayerActs& a, const float* x_in);
  static void head_input(Llama& m, float dloss);
  static void head_weights(Llama& m, Llama::Slot& sl);
};

void SplitBackward::layer_input(Llama& m, int64_t l, const float* P, Llama::LayerActs& a, const float* x_in,
                                float* dres) {
  KernelTimes& times_ = m.times_;  // MT_TIMED
  const ModelOptions& opts_ = m.opts_;
  const LayerParamOffsets& o = m.rel_[static_cast<size_t>(l)];
  const Llama::LayerLabels& at = m.labels_[static_cast<size_t>(l)];
  const int64_t gl = m.table_.stage.first_layer + l;
  const int64_t N = m.N_, Nl = m.Nl_, W = m.plan_.width(), F = m.td_.ffn;
  Llama::Buffers& b = *m.buf_;
  const tp::LinearPlan& p = m.plan_;
  const tp::LinearEntry &qkv = p.entry(Llama::kQkv), &out = p.entry(Llama::kO),
                        &gate_up = p.entry(Llama::kGateUp), &down = p.entry(Llama::kDown);
  a.w_norms.zero();  // the norm kernels accumulate
  {
    MT_TIMED(Kernel::gemm);  // dh; down's output gradient kept for W
    copy_floats(a.w_down.data(), m.dropped_grad(gl, "down_proj", dres), Nl * W);
    p.backward(b.dmid.data(), nullptr, a.w_down.data(), nullptr, P + o.down, N, down, at.down);
  }
  {
    MT_TIMED(Kernel::swiglu);  // d(gate|up), kept for W
    swiglu_backward(a.w_gu.data(), b.dmid.data(), a.gu.data(), N, F);
  }
  m.store_->poll();
  float* dln2 = m.column_dinput_buffer();
  {
    MT_TIMED(Kernel::gemm);
    p.backward(dln2, nullptr, a.w_gu.data(), nullptr, P + o.gate_up, N, gate_up, at.gate_up);
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    p.norm_backward(b.dtmp.data(), a.w_norms.data() + W, dln2, a.mid.data(), P + o.ln2, a.rstd2.data(), Nl,
                    at.norms);
    add_inplace(dres, b.dtmp.data(), Nl * W);  // dres is now dL/d(mid)
  }
  m.store_->poll();
  {
    MT_TIMED(Kernel::gemm);  // datt; o's output gradient kept for W
    copy_floats(a.w_o.data(), m.dropped_grad(gl, "o_proj", dres), Nl * W);
    p.backward(b.dmid.data(), nullptr, a.w_o.data(), nullptr, P + o.o, N, out, at.o);
  }
  m.attention_core_backward(gl, a);  // b.dqkv = d(q|k|v) before RoPE
  copy_floats(a.w_qkv.data(), b.dqkv.data(), a.w_qkv.numel());
  float* dln1 = m.column_dinput_buffer();
  {
    MT_TIMED(Kernel::gemm);
    p.backward(dln1, nullptr, a.w_qkv.data(), nullptr, P + o.qkv, N, qkv, at.qkv, at.kv);
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    p.norm_backward(b.dtmp.data(), a.w_norms.data(), dln1, x_in, P + o.ln1, a.rstd1.data(), Nl, at.norms);
    add_inplace(dres, b.dtmp.data(), Nl * W);  // dres is now dL/dx_in
  }
}

void SplitBackward::layer_weights(Llama& m, int64_t l, float* G, Llama::LayerActs& a, const float* x_in) {
  KernelTimes& times_ = m.times_;  // MT_TIMED
  const ModelOptions& opts_ = m.opts_;
  (void)x_in;  // the norms' gradients were formed in B, from x_in then
  const LayerParamOffsets& o = m.rel_[static_cast<size_t>(l)];
  const Llama::LayerLabels& at = m.labels_[static_cast<size_t>(l)];
  const int64_t N = m.N_, W = m.plan_.width();
  const tp::LinearPlan& p = m.plan_;
  const tp::LinearEntry &qkv = p.entry(Llama::kQkv), &out = p.entry(Llama::kO),
                        &gate_up = p.entry(Llama::kGateUp), &down = p.entry(Llama::kDown);
  MT_TIMED(Kernel::gemm);
  p.backward(nullptr, G + o.down, a.w_down.data(), p.gemm_input(a.h.data(), a.h_full.data(), down), nullptr,
             N, down, at.down);
  p.backward(nullptr, G + o.gate_up, a.w_gu.data(), p.gemm_input(a.ln2.data(), a.ln2_full.data(), gate_up),
             nullptr, N, gate_up, at.gate_up);
  add_inplace(G + o.ln2, a.w_norms.data() + W, W);
  m.store_->poll();
  p.backward(nullptr, G + o.o, a.w_o.data(), p.gemm_input(a.att.data(), a.att_full.data(), out), nullptr, N,
             out, at.o);
  p.backward(nullptr, G + o.qkv, a.w_qkv.data(), p.gemm_input(a.ln1.data(), a.ln1_full.data(), qkv), nullptr,
             N, qkv, at.qkv, at.kv);
  add_inplace(G + o.ln1, a.w_norms.data(), W);
}

// The head's B: cross-entropy (dlogits in place of the slot's logits, kept for
// W), the LM head's input gradient, the final norm (its weight gradient into
// the slot's w_lnf), leaving dL/d(stage output) in dres.
void SplitBackward::head_input(Llama& m, float dloss) {
  KernelTimes& times_ = m.times_;  // MT_TIMED
  const ModelOptions& opts_ = m.opts_;
  Llama::Slot& sl = *m.cur_;
  const tp::LinearEntry& e = m.plan_.entry(Llama::kHead);
  MT_CHECK(sl.has_targets, "backward needs a forward with targets");
  MT_CHECK(m.head_unit_ != m.table_.embed_unit, "a split backward's stage does not hold both ends");
  {
    MT_TIMED(Kernel::cross_entropy);
    m.plan_.loss_backward(sl.logits.data(), sl.logits.data(), sl.lse_ce.data(), sl.d_targets.data(), dloss,
                          m.N_, m.cfg_.vocab_size, kIgnoreIndex, e);
  }
  const int fu = m.table_.final_unit;
  const float* Fp = m.store_->acquire_params(fu, Pass::backward);
  float* dlnf = m.column_dinput_buffer();
  {
    MT_TIMED(Kernel::gemm);
    m.plan_.head_backward(dlnf, nullptr, sl.logits.data(), nullptr, Fp + m.head_rel_, m.N_, e);
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    sl.w_lnf.zero();
    m.plan_.norm_backward(m.buf_->dres.data(), sl.w_lnf.data(), dlnf, sl.resid.back().data(),
                          Fp + m.norm_rel_, sl.rstdf.data(), m.Nl_, m.final_norm_site());
  }
  m.store_->release_params(fu, Pass::backward);
}

void SplitBackward::head_weights(Llama& m, Llama::Slot& sl) {
  KernelTimes& times_ = m.times_;  // MT_TIMED
  const ModelOptions& opts_ = m.opts_;
  const tp::LinearEntry& e = m.plan_.entry(Llama::kHead);
  const int fu = m.table_.final_unit;
  float* Fg = m.store_->acquire_grads(fu);
  {
    MT_TIMED(Kernel::gemm);
    m.plan_.head_backward(nullptr, Fg + m.head_rel_, sl.logits.data(),
                          m.plan_.gemm_input(sl.lnf.data(), sl.lnf_full.data(), e), nullptr, m.N_, e);
  }
  add_inplace(Fg + m.norm_rel_, sl.w_lnf.data(), m.plan_.width());
  m.store_->release_grads(fu);
}

void Llama::backward_input_slot(int s, float dloss) {
  MT_CHECK(opts_.split_backward, "backward_input_slot needs ModelOptions::split_backward");
  use_slot(s);
  Slot& sl = *cur_;
  if (has_head()) SplitBackward::head_input(*this, dloss);
  for (int64_t i = n_stage_layers_ - 1; i >= 0; --i) {
    const int unit = layer_unit(i);
    const TraceScope span("layer", "backward B L", table_.stage.first_layer + i);  // --trace
    const float* P = store_->acquire_params(unit, Pass::backward);
    SplitBackward::layer_input(*this, i, P, acts_for(i), sl.resid[static_cast<size_t>(i)].data(),
                               buf_->dres.data());
    store_->release_params(unit, Pass::backward);
  }
  if (has_embed()) copy_floats(sl.w_embed.data(), buf_->dres.data(), sl.w_embed.numel());
}

// The units in the fused backward's order (head, layers last to first, the
// embedding), so that a store starts its reductions as it would.
void Llama::backward_weight_slot(int s) {
  MT_CHECK(opts_.split_backward, "backward_weight_slot needs ModelOptions::split_backward");
  use_slot(s);
  Slot& sl = *cur_;
  if (has_head()) SplitBackward::head_weights(*this, sl);
  for (int64_t i = n_stage_layers_ - 1; i >= 0; --i) {
    const int unit = layer_unit(i);
    const TraceScope span("layer", "backward W L", table_.stage.first_layer + i);  // --trace
    float* G = store_->acquire_grads(unit);
    SplitBackward::layer_weights(*this, i, G, acts_for(i), sl.resid[static_cast<size_t>(i)].data());
    store_->release_grads(unit);
  }
  if (has_embed()) {
    const int eu = table_.embed_unit;
    float* Eg = store_->acquire_grads(eu);
    {
      MT_TIMED(Kernel::embedding);
      plan_.embed_backward(Eg + (table_.embed - units_[static_cast<size_t>(eu)].begin), sl.w_embed.data(),
                           sl.d_inputs.data(), N_, cfg_.vocab_size, plan_.entry(kEmbed));
    }
    store_->release_grads(eu);
  }
  moe_after_backward(sl);
  sl.has_targets = false;
}

}  // namespace mt

// One decoder block, forward and backward. Its tensor-parallel communication
// is the linear plan's (parallel/linear_plan.h: each linear site and the
// norms, 1-D, with SP, or on a grid); its context-parallel attention is
// attention_'s (parallel/cp_attention.h).
#include <cstring>

#include "core/device.h"
#include "core/trace_spans.h"
#include "model/llama_internal.h"
#include "ops/attention.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "parallel/linear_plan.h"

namespace mt {

void Llama::layer_forward(int64_t l, const float* P, LayerActs& a, const float* x_in, float* x_out) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  const LayerLabels& at = labels_[static_cast<size_t>(l)];
  const int64_t gl = table_.stage.first_layer + l;                          // the layer's index in the model
  const TraceScope span("layer", x_out ? "forward L" : "recompute L", gl);  // --trace (recompute: no output)
  const int64_t N = N_, Nl = Nl_, W = plan_.width(), F = td_.ffn, D = cfg_.head_dim();
  const int64_t H = td_.heads, KV = kv_att_, Q = H * D, QKV = Q + 2 * KV * D;
  const int32_t* pos = cur_->d_pos.data();
  const float eps = static_cast<float>(cfg_.norm_eps);
  const tp::LinearPlan& p = plan_;
  float* ln1 = norm_output(a.ln1);
  {
    MT_TIMED(Kernel::rmsnorm);
    p.norm_forward(ln1, a.rstd1.data(), x_in, P + o.ln1, Nl, eps, at.norms);
  }
  probe(gl, "ln1", false, ln1, ProbeRows::resid);
  {
    MT_TIMED(Kernel::gemm);  // q, k, v in one GEMM
    p.forward(a.qkv.data(), a.ln1_full.data(), ln1, P + o.qkv, N, p.entry(kQkv), at.qkv);
  }
  {
    MT_TIMED(Kernel::rope);  // q and k, by the attention strategy (the KV cache's may keep k unrotated)
    attention_->rotate(a.qkv.data(), pos, rope_, N, H, KV, QKV);
  }
  probe(gl, "qkv", false, a.qkv.data(), ProbeRows::batch, &p.entry(kQkv), true);
  attention_core_forward(l, a);
  probe(gl, "att", false, a.att.data(), ProbeRows::batch, &p.entry(kO), false);
  {
    MT_TIMED(Kernel::gemm);  // mid = x + o_proj(att), with hidden dropout: x + dropout(o_proj(att))
    const DropoutKey drop = dropout_at(gl, "o_proj", cfg_.hidden_dropout);
    p.forward(a.mid.data(), a.att_full.data(), a.att.data(), P + o.o, N, p.entry(kO), at.o,
              drop.on ? nullptr : x_in);
    if (drop.on) {
      dropout_rows(a.mid.data(), Nl, W, drop, residual_coords());
      add_inplace(a.mid.data(), x_in, Nl * W);
    }
  }
  probe(gl, "mid", false, a.mid.data(), ProbeRows::resid);
  // A mixture of experts reads its own tokens' norm (its Nl rows, kept in a.ln2): not gathered over tp.
  float* ln2 = norm_output(a.ln2);
  {
    MT_TIMED(Kernel::rmsnorm);
    p.norm_forward(ln2, a.rstd2.data(), a.mid.data(), P + o.ln2, Nl, eps, at.norms);
  }
  probe(gl, "ln2", false, ln2, ProbeRows::resid);
  if (o.moe()) {  // the mixture of experts in place of the MLP (experts not split over tp)
    moe_forward(l, P, a, x_out, x_out != nullptr);
    return;
  }
  {
    MT_TIMED(Kernel::gemm);  // gate and up in one GEMM
    p.forward(a.gu.data(), a.ln2_full.data(), ln2, P + o.gate_up, N, p.entry(kGateUp), at.gate_up);
  }
  probe(gl, "gate_up", false, a.gu.data(), ProbeRows::batch, &p.entry(kGateUp), true);
  {
    MT_TIMED(Kernel::swiglu);
    swiglu_forward(a.h.data(), a.gu.data(), N, F);
  }
  probe(gl, "h", false, a.h.data(), ProbeRows::batch, &p.entry(kDown), false);
  MT_TIMED(Kernel::gemm);  // x_out = mid + down(h), with hidden dropout: mid + dropout(down(h))
  if (x_out == nullptr) {  // recomputation: down's backward reads its input (gathered, where it gathers)
    p.keep_input(a.h_full.data(), a.h.data(), N, p.entry(kDown), at.down);
    return;
  }
  const DropoutKey drop = dropout_at(gl, "down_proj", cfg_.hidden_dropout);
  p.forward(x_out, a.h_full.data(), a.h.data(), P + o.down, N, p.entry(kDown), at.down,
            drop.on ? nullptr : a.mid.data());
  if (drop.on) {
    dropout_rows(x_out, Nl, W, drop, residual_coords());
    add_inplace(x_out, a.mid.data(), Nl * W);
  }
}

// The attention between the q|k|v and o projections: att and lse from the
// rotated q|k|v (local, ring or all-gather over cp; dropout by its coordinates).
void Llama::attention_core_forward(int64_t l, LayerActs& a) {
  const int64_t gl = table_.stage.first_layer + l, D = cfg_.head_dim();
  const int64_t H = td_.heads, KV = kv_att_, Q = H * D, QKV = Q + 2 * KV * D;
  const int32_t* pos = cur_->d_pos.data();
  MT_TIMED(Kernel::attention);
  AttentionDims d{B_, T_, T_, H, KV, D, QKV, QKV, Q};
  AttentionDropout dr;
  d.dropout = attention_dropout(gl, &dr);
  const float* q = a.qkv.data();
  const float *k = q + Q, *v = q + Q + KV * D;
  attention_->forward(l, a.att.data(), a.lse.data(), q, k, v, pos, pos, d, site_of(gl, "attn"));
}

// What a selective choice recomputes, each as layer_forward makes it (the same
// kernels, and collectives where a GEMM gathers its input, on the same kept
// inputs: x_in, qkv, mid, gu), so that the backward reads bitwise the
// forward's values.
void Llama::layer_recompute(int64_t l, const float* P, LayerActs& a, const float* x_in) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  const LayerLabels& at = labels_[static_cast<size_t>(l)];
  const tp::LinearPlan& p = plan_;
  const Recompute& r = opts_.recompute;
  const TraceScope span("layer", "recompute L", table_.stage.first_layer + l);  // --trace, as a full one's
  const float eps = static_cast<float>(cfg_.norm_eps);
  if (r.recomputes(RecomputeModule::norms)) {
    float* ln1 = norm_output(a.ln1);
    {
      MT_TIMED(Kernel::rmsnorm);
      p.norm_forward(ln1, a.rstd1.data(), x_in, P + o.ln1, Nl_, eps, at.norms);
    }
    p.keep_input(a.ln1_full.data(), ln1, N_, p.entry(kQkv), at.qkv);
    float* ln2 = norm_output(a.ln2);
    {
      MT_TIMED(Kernel::rmsnorm);
      p.norm_forward(ln2, a.rstd2.data(), a.mid.data(), P + o.ln2, Nl_, eps, at.norms);
    }
    if (!o.moe()) p.keep_input(a.ln2_full.data(), ln2, N_, p.entry(kGateUp), at.gate_up);
  }
  if (r.recomputes(RecomputeModule::attention)) {
    attention_core_forward(l, a);
    p.keep_input(a.att_full.data(), a.att.data(), N_, p.entry(kO), at.o);
  }
  if (r.recomputes(RecomputeModule::mlp) && !o.moe()) {
    {
      MT_TIMED(Kernel::swiglu);
      swiglu_forward(a.h.data(), a.gu.data(), N_, td_.ffn);
    }
    p.keep_input(a.h_full.data(), a.h.data(), N_, p.entry(kDown), at.down);
  }
}

// dL/d(the dropped projection output) = dropout mask ∘ dres, in dtmp (free
// between the norms' backwards); dres itself when the site's dropout is off.
const float* Llama::dropped_grad(int64_t gl, const char* site, const float* dres) {
  const DropoutKey drop = dropout_at(gl, site, cfg_.hidden_dropout);
  if (!drop.on) return dres;
  float* g = buf_->dtmp.data();
  const int64_t W = plan_.width();
  copy_bytes(g, dres, Nl_ * W * int64_t{sizeof(float)});
  dropout_rows(g, Nl_, W, drop, residual_coords());
  return g;
}

void Llama::layer_backward(int64_t l, const float* P, float* G, LayerActs& a, const float* x_in,
                           float* dres) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  const LayerLabels& at = labels_[static_cast<size_t>(l)];
  const int64_t gl = table_.stage.first_layer + l;  // the layer's index in the model
  const int64_t N = N_, Nl = Nl_, W = plan_.width(), F = td_.ffn;
  Buffers& b = *buf_;
  const tp::LinearPlan& p = plan_;
  const tp::LinearEntry &qkv = p.entry(kQkv), &out = p.entry(kO), &gate_up = p.entry(kGateUp),
                        &down = p.entry(kDown);
  // The norm weights' gradients, Partial over tp when each rank read only its
  // tokens (SP): collected, and summed over tp once at the end.
  const tp::PartialGrads norm_grads = p.partial_grads(b.normg.data(), 2 * W);
  float* g_ln1 = norm_grads.into(G + o.ln1, 0);
  float* g_ln2 = norm_grads.into(G + o.ln2, W);
  // MLP: x = mid + down(h) (or the mixture of experts); dres is dL/dx on entry.
  float* dln2 = column_dinput_buffer();
  if (o.moe()) {
    moe_backward(l, P, G, a, dres, dln2);  // dL/d(ln2) [Nl, C], complete: nothing to sum over tp
  } else {
    {
      MT_TIMED(Kernel::gemm);  // dh
      p.backward(b.dmid.data(), G + o.down, dropped_grad(gl, "down_proj", dres),
                 p.gemm_input(a.h.data(), a.h_full.data(), down), P + o.down, N, down, at.down);
    }
    probe(gl, "h", true, b.dmid.data(), ProbeRows::batch, &down, false);
    {
      MT_TIMED(Kernel::swiglu);
      swiglu_backward(b.dgu.data(), b.dmid.data(), a.gu.data(), N, F);
    }
    probe(gl, "gate_up", true, b.dgu.data(), ProbeRows::batch, &gate_up, true);
    store_->poll();
    MT_TIMED(Kernel::gemm);
    p.backward(dln2, G + o.gate_up, b.dgu.data(), p.gemm_input(a.ln2.data(), a.ln2_full.data(), gate_up),
               P + o.gate_up, N, gate_up, at.gate_up);
  }
  probe(gl, "ln2", true, dln2, ProbeRows::resid);
  {
    MT_TIMED(Kernel::rmsnorm);
    p.norm_backward(b.dtmp.data(), g_ln2, dln2, a.mid.data(), P + o.ln2, a.rstd2.data(), Nl, at.norms);
    add_inplace(dres, b.dtmp.data(), Nl * W);  // dres is now dL/d(mid)
  }
  probe(gl, "mid", true, dres, ProbeRows::resid);
  store_->poll();
  // Attention: mid = x + o_proj(att).
  {
    MT_TIMED(Kernel::gemm);  // datt
    p.backward(b.dmid.data(), G + o.o, dropped_grad(gl, "o_proj", dres),
               p.gemm_input(a.att.data(), a.att_full.data(), out), P + o.o, N, out, at.o);
  }
  probe(gl, "att", true, b.dmid.data(), ProbeRows::batch, &out, false);
  attention_core_backward(gl, a);  // b.dqkv = d(q|k|v) before RoPE
  probe(gl, "qkv", true, b.dqkv.data(), ProbeRows::batch, &qkv, true);
  // A kv head replicated on several tp ranks gets a part of its gradient from
  // each (through that rank's query heads): the entry sums the parts over the
  // replicas, once, before they join G.
  float* dln1 = column_dinput_buffer();
  {
    MT_TIMED(Kernel::gemm);
    p.backward(dln1, G + o.qkv, b.dqkv.data(), p.gemm_input(a.ln1.data(), a.ln1_full.data(), qkv), P + o.qkv,
               N, qkv, at.qkv, at.kv);
  }
  probe(gl, "ln1", true, dln1, ProbeRows::resid);
  {
    MT_TIMED(Kernel::rmsnorm);
    p.norm_backward(b.dtmp.data(), g_ln1, dln1, x_in, P + o.ln1, a.rstd1.data(), Nl, at.norms);
    add_inplace(dres, b.dtmp.data(), Nl * W);  // dres is now dL/dx_in
  }
  probe(gl, "in", true, dres, ProbeRows::resid);
  norm_grads.finish({{G + o.ln1, W}, {G + o.ln2, W}}, at.norms, "sp weight grads", {2, W});
}

// The attention between the q|k|v and o projections, backward: from
// dL/d(att) in dmid to dL/d(q|k|v) in dqkv, through attention (local, ring or
// all-gather over cp) and RoPE. gl: the layer's index in the model.
void Llama::attention_core_backward(int64_t gl, LayerActs& a) {
  const int64_t B = B_, T = T_, N = N_, D = cfg_.head_dim();
  const int64_t H = td_.heads, KV = kv_att_, Q = H * D, QKV = Q + 2 * KV * D;
  const int32_t* pos = cur_->d_pos.data();
  Buffers& b = *buf_;
  {
    MT_TIMED(Kernel::attention);
    b.dqkv.zero();  // attention_backward accumulates
    AttentionDims d{B, T, T, H, KV, D, QKV, QKV, Q};
    AttentionDropout dr;
    d.dropout = attention_dropout(gl, &dr);
    const float* q = a.qkv.data();
    float* dq = b.dqkv.data();
    const float *k = q + Q, *v = q + Q + KV * D;
    float *dk = dq + Q, *dv = dq + Q + KV * D;
    attention_->backward(dq, dk, dv, b.dmid.data(), a.att.data(), a.lse.data(), q, k, v, pos, pos, d,
                         site_of(gl, "attn"));
  }
  store_->poll();
  {
    MT_TIMED(Kernel::rope);
    rope_backward(b.dqkv.data(), pos, rope_, N, H, QKV);
    rope_backward(b.dqkv.data() + Q, pos, rope_, N, KV, QKV);
  }
}

}  // namespace mt

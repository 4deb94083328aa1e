// One decoder block, forward and backward, with its tensor-parallel
// communication (the conjugate pairs of parallel/tp_comm.h at the edges of the
// attention and MLP halves) and its context-parallel attention.
#include <cstring>

#include "model/llama_internal.h"
#include "ops/attention.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "parallel/context_parallel.h"
#include "parallel/tp_comm.h"

namespace mt {

const float* Llama::column_input(const float* ln, float* full, const std::string& site) {
  if (!sp_on()) {
    if (tp_) tp::copy_to_tp_forward(ln, N_, cfg_.d_model, *tp_, site);  // identity: every rank has ln
    return ln;
  }
  tp::gather_from_sp_forward(full, ln, N_, cfg_.d_model, *tp_, site);
  return full;
}

void Llama::row_out(float* out, const float* resid, const float* inp, const float* W, int64_t ICl,
                    const std::string& site) {
  const int64_t N = N_, Nl = Nl_, C = cfg_.d_model;
  if (!tp_) {
    MT_TIMED(Kernel::gemm);
    std::memcpy(out, resid, static_cast<size_t>(N * C) * sizeof(float));
    linear_forward(out, inp, W, N, ICl, C, Out::add);  // residual add fused
    return;
  }
  float* part = buf_->part.data();
  {
    MT_TIMED(Kernel::gemm);
    linear_forward(part, inp, W, N, ICl, C);  // this rank's partial sum
  }
  if (sp_on()) {
    tp::scatter_to_sp_forward(out, part, N, C, *tp_, site);
  } else {
    tp::reduce_from_tp_forward(part, N, C, *tp_, site);
    std::memcpy(out, part, static_cast<size_t>(N * C) * sizeof(float));
  }
  add_inplace(out, resid, Nl * C);
}

const float* Llama::row_dout(const float* dres, const std::string& site) {
  if (!sp_on()) {
    if (tp_) tp::reduce_from_tp_backward(dres, N_, cfg_.d_model, *tp_, site);  // identity
    return dres;
  }
  tp::scatter_to_sp_backward(buf_->dfull.data(), dres, N_, cfg_.d_model, *tp_, site);
  return buf_->dfull.data();
}

const float* Llama::column_dinput(const float* dout, const float* W, int64_t OCl, const std::string& site) {
  const int64_t N = N_, C = cfg_.d_model;
  float* part = tp_ ? buf_->part.data() : buf_->dmid.data();
  {
    MT_TIMED(Kernel::gemm);
    linear_backward(part, nullptr, dout, nullptr, W, N, C, OCl);
  }
  if (!tp_) return part;
  if (!sp_on()) {
    tp::copy_to_tp_backward(part, N, C, *tp_, site);
    return part;
  }
  tp::gather_from_sp_backward(buf_->dln.data(), part, N, C, *tp_, site);
  return buf_->dln.data();
}

void Llama::layer_forward(int64_t l, const float* P, LayerActs& a, const float* x_in, float* x_out) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  const int64_t gl = table_.stage.first_layer + l;  // the layer's index in the model
  const int64_t B = B_, T = T_, N = N_, Nl = Nl_, C = cfg_.d_model, F = td_.ffn, D = cfg_.head_dim();
  const int64_t H = td_.heads, KV = td_.kv_heads, Q = H * D, QKV = Q + 2 * KV * D;
  const int32_t* pos = cur_->pos.data();
  const float eps = static_cast<float>(cfg_.norm_eps);
  const bool sp = sp_on();
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_forward(sp ? norm_scratch() : a.ln1.data(), a.rstd1.data(), x_in, P + o.ln1, Nl, C, eps);
  }
  const float* x1 =
      column_input(sp ? norm_scratch() : a.ln1.data(), a.ln1_full.data(), site_of(gl, "attn qkv"));
  {
    MT_TIMED(Kernel::gemm);
    linear_forward(a.qkv.data(), x1, P + o.qkv, N, C, QKV);  // q, k, v in one GEMM
  }
  {
    MT_TIMED(Kernel::rope);
    rope_forward(a.qkv.data(), pos, rope_, N, H, QKV);       // q
    rope_forward(a.qkv.data() + Q, pos, rope_, N, KV, QKV);  // k
  }
  {
    MT_TIMED(Kernel::attention);
    AttentionDims d{B, T, T, H, KV, D, QKV, QKV, Q};
    const float* q = a.qkv.data();
    const float *k = q + Q, *v = q + Q + KV * D;
    if (!cp_)
      attention_forward(a.att.data(), a.lse.data(), q, k, v, pos, pos, d);
    else if (opts_.cp_ring)
      cp::ring_attention_forward(a.att.data(), a.lse.data(), q, k, v, pos, pos, d, *cp_, site_of(gl, "attn"));
    else
      cp::allgather_attention_forward(a.att.data(), a.lse.data(), q, k, v, pos, pos, d, *cp_,
                                      site_of(gl, "attn"));
  }
  row_out(a.mid.data(), x_in, a.att.data(), P + o.o, Q, site_of(gl, "attn o"));
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_forward(sp ? norm_scratch() : a.ln2.data(), a.rstd2.data(), a.mid.data(), P + o.ln2, Nl, C, eps);
  }
  const float* x2 =
      column_input(sp ? norm_scratch() : a.ln2.data(), a.ln2_full.data(), site_of(gl, "mlp gate_up"));
  {
    MT_TIMED(Kernel::gemm);
    linear_forward(a.gu.data(), x2, P + o.gate_up, N, C, 2 * F);  // gate and up in one GEMM
  }
  {
    MT_TIMED(Kernel::swiglu);
    swiglu_forward(a.h.data(), a.gu.data(), N, F);
  }
  if (x_out == nullptr) return;  // recomputation needs the activations, not the output
  row_out(x_out, a.mid.data(), a.h.data(), P + o.down, F, site_of(gl, "mlp down"));
}

void Llama::layer_backward(int64_t l, const float* P, float* G, LayerActs& a, const float* x_in,
                           float* dres) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  const int64_t gl = table_.stage.first_layer + l;  // the layer's index in the model
  const int64_t B = B_, T = T_, N = N_, Nl = Nl_, C = cfg_.d_model, F = td_.ffn, D = cfg_.head_dim();
  const int64_t H = td_.heads, KV = td_.kv_heads, Q = H * D, QKV = Q + 2 * KV * D;
  const int32_t* pos = cur_->pos.data();
  Buffers& b = *buf_;
  const bool sp = sp_on();
  // Under SP the norm weights' gradients are partial (this rank's tokens): they
  // collect in normg, are summed over tp below, and only then added to G.
  float* g_ln1 = sp ? b.normg.data() : G + o.ln1;
  float* g_ln2 = sp ? b.normg.data() + C : G + o.ln2;
  if (sp) b.normg.zero();
  const float* ln1_in = sp ? a.ln1_full.data() : a.ln1.data();  // what the q|k|v GEMM read
  const float* ln2_in = sp ? a.ln2_full.data() : a.ln2.data();
  // MLP: x = mid + down(h); dres is dL/dx on entry.
  const float* dy = row_dout(dres, site_of(gl, "mlp down"));
  {
    MT_TIMED(Kernel::gemm);
    linear_backward(b.dmid.data(), G + o.down, dy, a.h.data(), P + o.down, N, F, C);  // dh
  }
  {
    MT_TIMED(Kernel::swiglu);
    swiglu_backward(b.dgu.data(), b.dmid.data(), a.gu.data(), N, F);
  }
  store_->poll();
  {
    MT_TIMED(Kernel::gemm);
    linear_backward(nullptr, G + o.gate_up, b.dgu.data(), ln2_in, P + o.gate_up, N, C, 2 * F);
  }
  const float* dln2 = column_dinput(b.dgu.data(), P + o.gate_up, 2 * F, site_of(gl, "mlp gate_up"));
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_backward(b.dtmp.data(), g_ln2, dln2, a.mid.data(), P + o.ln2, a.rstd2.data(), Nl, C);
    add_inplace(dres, b.dtmp.data(), Nl * C);  // dres is now dL/d(mid)
  }
  store_->poll();
  // Attention: mid = x + o_proj(att).
  const float* dmid = row_dout(dres, site_of(gl, "attn o"));
  {
    MT_TIMED(Kernel::gemm);
    linear_backward(b.dmid.data(), G + o.o, dmid, a.att.data(), P + o.o, N, Q, C);  // datt
  }
  {
    MT_TIMED(Kernel::attention);
    b.dqkv.zero();  // attention_backward accumulates
    AttentionDims d{B, T, T, H, KV, D, QKV, QKV, Q};
    const float* q = a.qkv.data();
    float* dq = b.dqkv.data();
    const float *k = q + Q, *v = q + Q + KV * D;
    float *dk = dq + Q, *dv = dq + Q + KV * D;
    const float* datt = b.dmid.data();
    if (!cp_)
      attention_backward(dq, dk, dv, datt, a.att.data(), a.lse.data(), q, k, v, pos, pos, d);
    else if (opts_.cp_ring)
      cp::ring_attention_backward(dq, dk, dv, datt, a.att.data(), a.lse.data(), q, k, v, pos, pos, d, *cp_,
                                  site_of(gl, "attn"));
    else
      cp::allgather_attention_backward(dq, dk, dv, datt, a.att.data(), a.lse.data(), q, k, v, pos, pos, d,
                                       *cp_, site_of(gl, "attn"));
  }
  store_->poll();
  {
    MT_TIMED(Kernel::rope);
    rope_backward(b.dqkv.data(), pos, rope_, N, H, QKV);
    rope_backward(b.dqkv.data() + Q, pos, rope_, N, KV, QKV);
  }
  // A kv head replicated on several tp ranks gets a part of its gradient from
  // each (through that rank's query heads): the parts are summed over the
  // replicas, once, before they join G.
  float* gkv = G + o.qkv + Q * C;
  const int64_t nkv = 2 * KV * D * C;
  if (kv_group_) {
    std::memcpy(b.kvg.data(), gkv, static_cast<size_t>(nkv) * sizeof(float));
    std::memset(gkv, 0, static_cast<size_t>(nkv) * sizeof(float));
  }
  {
    MT_TIMED(Kernel::gemm);
    linear_backward(nullptr, G + o.qkv, b.dqkv.data(), ln1_in, P + o.qkv, N, C, QKV);
  }
  if (kv_group_) {
    kv_group_->all_reduce(
        gkv, nkv, tp::comm_label(site_of(gl, "attn k|v"), "replica grads", "backward", {2 * KV * D, C}));
    add_inplace(gkv, b.kvg.data(), nkv);
  }
  const float* dln1 = column_dinput(b.dqkv.data(), P + o.qkv, QKV, site_of(gl, "attn qkv"));
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_backward(b.dtmp.data(), g_ln1, dln1, x_in, P + o.ln1, a.rstd1.data(), Nl, C);
    add_inplace(dres, b.dtmp.data(), Nl * C);  // dres is now dL/dx_in
  }
  if (sp) {
    tp_->all_reduce(b.normg.data(), 2 * C,
                    tp::comm_label(site_of(gl, "norms"), "sp weight grads", "backward", {2, C}));
    add_inplace(G + o.ln1, b.normg.data(), C);
    add_inplace(G + o.ln2, b.normg.data() + C, C);
  }
}

}  // namespace mt

// One decoder block, forward and backward, with its tensor-parallel
// communication (the conjugate pairs of parallel/tp_comm.h at the edges of the
// attention and MLP halves) and its context-parallel attention.
#include <cstring>

#include "core/trace_spans.h"
#include "model/llama_internal.h"
#include "ops/attention.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp_comm.h"
#include "parallel/tp_plan.h"

namespace mt {

void Llama::layer_forward(int64_t l, const float* P, LayerActs& a, const float* x_in, float* x_out) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  const int64_t gl = table_.stage.first_layer + l;                          // the layer's index in the model
  const TraceScope span("layer", x_out ? "forward L" : "recompute L", gl);  // --trace (recompute: no output)
  const int64_t B = B_, T = T_, N = N_, Nl = Nl_, C = cfg_.d_model, F = td_.ffn, D = cfg_.head_dim();
  const int64_t H = td_.heads, KV = td_.kv_heads, Q = H * D, QKV = Q + 2 * KV * D;
  const int32_t* pos = cur_->pos.data();
  const float eps = static_cast<float>(cfg_.norm_eps);
  const bool sp = sp_on();
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_forward(sp ? norm_scratch() : a.ln1.data(), a.rstd1.data(), x_in, P + o.ln1, Nl, C, eps);
  }
  {
    MT_TIMED(Kernel::gemm);  // q, k, v in one GEMM
    const std::string site = tp::layer_site(gl, "self_attn.q_proj.weight");
    tp::column_parallel_forward(a.qkv.data(), a.ln1_full.data(), sp ? norm_scratch() : a.ln1.data(),
                                P + o.qkv, N, C, QKV, tp_layer(site));
  }
  {
    MT_TIMED(Kernel::rope);  // q and k, by the attention strategy (the KV cache's may keep k unrotated)
    attention_->rotate(a.qkv.data(), pos, rope_, N, H, KV, QKV);
  }
  {
    MT_TIMED(Kernel::attention);
    AttentionDims d{B, T, T, H, KV, D, QKV, QKV, Q};
    AttentionDropout dr;
    d.dropout = attention_dropout(gl, &dr);
    const float* q = a.qkv.data();
    const float *k = q + Q, *v = q + Q + KV * D;
    attention_->forward(l, a.att.data(), a.lse.data(), q, k, v, pos, pos, d, site_of(gl, "attn"));
  }
  {
    MT_TIMED(Kernel::gemm);  // mid = x + o_proj(att), with hidden dropout: x + dropout(o_proj(att))
    const std::string site = tp::layer_site(gl, "self_attn.o_proj.weight");
    const DropoutKey drop = dropout_at(gl, "o_proj", cfg_.hidden_dropout);
    tp::row_parallel_forward(a.mid.data(), part_scratch(), a.att.data(), P + o.o, N, Q, C, tp_layer(site),
                             drop.on ? nullptr : x_in);
    if (drop.on) {
      dropout_rows(a.mid.data(), Nl, C, drop, residual_coords());
      add_inplace(a.mid.data(), x_in, Nl * C);
    }
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    // A mixture of experts reads its own tokens' norm (its Nl rows): it is not gathered over tp.
    rmsnorm_forward(sp && !o.moe() ? norm_scratch() : a.ln2.data(), a.rstd2.data(), a.mid.data(), P + o.ln2,
                    Nl, C, eps);
  }
  if (o.moe()) {  // the mixture of experts in place of the MLP (experts not split over tp)
    moe_forward(l, P, a, x_out, x_out != nullptr);
    return;
  }
  {
    MT_TIMED(Kernel::gemm);  // gate and up in one GEMM
    const std::string site = tp::layer_site(gl, "mlp.gate_proj.weight");
    tp::column_parallel_forward(a.gu.data(), a.ln2_full.data(), sp ? norm_scratch() : a.ln2.data(),
                                P + o.gate_up, N, C, 2 * F, tp_layer(site));
  }
  {
    MT_TIMED(Kernel::swiglu);
    swiglu_forward(a.h.data(), a.gu.data(), N, F);
  }
  if (x_out == nullptr) return;  // recomputation needs the activations, not the output
  MT_TIMED(Kernel::gemm);        // x_out = mid + down(h), with hidden dropout: mid + dropout(down(h))
  const std::string site = tp::layer_site(gl, "mlp.down_proj.weight");
  const DropoutKey drop = dropout_at(gl, "down_proj", cfg_.hidden_dropout);
  tp::row_parallel_forward(x_out, part_scratch(), a.h.data(), P + o.down, N, F, C, tp_layer(site),
                           drop.on ? nullptr : a.mid.data());
  if (drop.on) {
    dropout_rows(x_out, Nl, C, drop, residual_coords());
    add_inplace(x_out, a.mid.data(), Nl * C);
  }
}

// dL/d(the dropped projection output) = dropout mask ∘ dres, in dtmp (free
// between the norms' backwards); dres itself when the site's dropout is off.
const float* Llama::dropped_grad(int64_t gl, const char* site, const float* dres) {
  const DropoutKey drop = dropout_at(gl, site, cfg_.hidden_dropout);
  if (!drop.on) return dres;
  float* g = buf_->dtmp.data();
  std::copy(dres, dres + Nl_ * cfg_.d_model, g);
  dropout_rows(g, Nl_, cfg_.d_model, drop, residual_coords());
  return g;
}

void Llama::layer_backward(int64_t l, const float* P, float* G, LayerActs& a, const float* x_in,
                           float* dres) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  const int64_t gl = table_.stage.first_layer + l;  // the layer's index in the model
  const int64_t N = N_, Nl = Nl_, C = cfg_.d_model, F = td_.ffn, D = cfg_.head_dim();
  const int64_t H = td_.heads, KV = td_.kv_heads, Q = H * D, QKV = Q + 2 * KV * D;
  Buffers& b = *buf_;
  const bool sp = sp_on();
  // Under SP the norm weights' gradients are partial (this rank's tokens): they
  // collect in normg, are summed over tp below, and only then added to G.
  float* g_ln1 = sp ? b.normg.data() : G + o.ln1;
  float* g_ln2 = sp ? b.normg.data() + C : G + o.ln2;
  if (sp) b.normg.zero();
  const float* ln1_in = sp ? a.ln1_full.data() : a.ln1.data();  // what the q|k|v GEMM read
  const float* ln2_in = sp ? a.ln2_full.data() : a.ln2.data();
  // MLP: x = mid + down(h) (or the mixture of experts); dres is dL/dx on entry.
  float* dln2 = column_dinput_buffer();
  if (o.moe()) {
    moe_backward(l, P, G, a, dres, dln2);  // dL/d(ln2) [Nl, C], complete: nothing to sum over tp
  } else {
    {
      MT_TIMED(Kernel::gemm);  // dh
      const std::string site = tp::layer_site(gl, "mlp.down_proj.weight");
      tp::row_parallel_backward(b.dmid.data(), G + o.down, b.dfull.data(),
                                dropped_grad(gl, "down_proj", dres), a.h.data(), P + o.down, N, F, C,
                                tp_layer(site));
    }
    {
      MT_TIMED(Kernel::swiglu);
      swiglu_backward(b.dgu.data(), b.dmid.data(), a.gu.data(), N, F);
    }
    store_->poll();
    MT_TIMED(Kernel::gemm);
    const std::string site = tp::layer_site(gl, "mlp.gate_proj.weight");
    tp::column_parallel_backward(dln2, G + o.gate_up, b.part.data(), b.dgu.data(), ln2_in, P + o.gate_up, N,
                                 C, 2 * F, tp_layer(site));
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_backward(b.dtmp.data(), g_ln2, dln2, a.mid.data(), P + o.ln2, a.rstd2.data(), Nl, C);
    add_inplace(dres, b.dtmp.data(), Nl * C);  // dres is now dL/d(mid)
  }
  store_->poll();
  // Attention: mid = x + o_proj(att).
  {
    MT_TIMED(Kernel::gemm);  // datt
    const std::string site = tp::layer_site(gl, "self_attn.o_proj.weight");
    tp::row_parallel_backward(b.dmid.data(), G + o.o, b.dfull.data(), dropped_grad(gl, "o_proj", dres),
                              a.att.data(), P + o.o, N, Q, C, tp_layer(site));
  }
  attention_core_backward(gl, a);  // b.dqkv = d(q|k|v) before RoPE
  // A kv head replicated on several tp ranks gets a part of its gradient from
  // each (through that rank's query heads): the parts are summed over the
  // replicas, once, before they join G.
  float* dln1 = column_dinput_buffer();
  {
    MT_TIMED(Kernel::gemm);
    const std::string site = tp::layer_site(gl, "self_attn.q_proj.weight"),
                      kv_site = tp::layer_site(gl, "self_attn.k_proj.weight");
    const tp::ReplicatedRows kv{kv_group_, Q, 2 * KV * D, C, b.kvg.data(), kv_site};
    tp::column_parallel_backward(dln1, G + o.qkv, b.part.data(), b.dqkv.data(), ln1_in, P + o.qkv, N, C, QKV,
                                 tp_layer(site), kv);
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_backward(b.dtmp.data(), g_ln1, dln1, x_in, P + o.ln1, a.rstd1.data(), Nl, C);
    add_inplace(dres, b.dtmp.data(), Nl * C);  // dres is now dL/dx_in
  }
  if (sp) {
    tp_->all_reduce(
        b.normg.data(), 2 * C,
        tp::comm_label(tp::layer_site(gl, "input_layernorm.weight"), "sp weight grads", "backward", {2, C}));
    add_inplace(G + o.ln1, b.normg.data(), C);
    add_inplace(G + o.ln2, b.normg.data() + C, C);
  }
}

// The attention between the q|k|v and o projections, backward: from
// dL/d(att) in dmid to dL/d(q|k|v) in dqkv, through attention (local, ring or
// all-gather over cp) and RoPE. gl: the layer's index in the model.
void Llama::attention_core_backward(int64_t gl, LayerActs& a) {
  const int64_t B = B_, T = T_, N = N_, D = cfg_.head_dim();
  const int64_t H = td_.heads, KV = td_.kv_heads, Q = H * D, QKV = Q + 2 * KV * D;
  const int32_t* pos = cur_->pos.data();
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

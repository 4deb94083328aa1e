// One decoder block under 2-D tensor parallelism on an R × C grid of the tp
// ranks (docs/PARALLELISM.md "2-D tensor parallelism"), forward and backward.
// The residual stream holds d/(RC) features of every token; each norm sums
// its squares over tp; q|k|v and gate|up are "row-in" layers (input gathered
// over tp_c, output reduce-scattered over tp_r), o and down "col-in" layers
// (gathered over tp_r, scattered over tp_c), all through parallel/tp2d_linear.h;
// attention and SwiGLU run on this rank's heads and hidden channels, block
// c·R + r of R·C. No weight gradient needs a tp reduction: each rank's is its
// block of the full one.
#include <string>

#include "core/trace_spans.h"
#include "model/llama_internal.h"
#include "ops/attention.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "parallel/tp2d_linear.h"
#include "parallel/tp_comm.h"
#include "parallel/tp_plan.h"

namespace mt {

namespace {

// q|k|v, gate|up: in-dim over tp_r, so the input is gathered over tp_c and
// the output, Partial over tp_r, reduce-scattered over it by fused blocks.
tp2d::Linear2d row_in(const ModelOptions& o, std::string_view site, tp2d::Blocks blocks) {
  return {o.tp_c, o.tp_r, std::move(blocks), site};
}

// o, down: in-dim over tp_c, so the input is gathered over tp_r and the
// output, Partial over tp_c, reduce-scattered over it.
tp2d::Linear2d col_in(const ModelOptions& o, std::string_view site) {
  return {o.tp_r, o.tp_c, {}, site};
}

}  // namespace

void Llama::layer_forward_2d(int64_t l, const float* P, LayerActs& a, const float* x_in, float* x_out) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  const int64_t gl = table_.stage.first_layer + l;
  const TraceScope span("layer", x_out ? "forward L" : "recompute L", gl);  // --trace (recompute: no output)
  const Widths2d w(cfg_, td_, opts_.grid);
  const int64_t B = B_, T = T_, N = N_, d = cfg_.d_model, D = cfg_.head_dim(), H = td_.heads,
                KV = td_.kv_heads;
  const int32_t* pos = cur_->pos.data();
  const float eps = static_cast<float>(cfg_.norm_eps);
  float* scratch = buf_->grid.data();
  const std::string norms = tp::layer_site(gl, "input_layernorm.weight");
  {
    MT_TIMED(Kernel::rmsnorm);
    tp2d::rmsnorm2d_forward(a.ln1.data(), a.rstd1.data(), x_in, P + o.ln1, N, w.dl, d, eps, *tp_, norms);
  }
  {
    MT_TIMED(Kernel::gemm);  // q, k, v in one GEMM: [N, d/R] → this rank's heads [N, (H+2KV)·hd/(RC)]
    const std::string site = tp::layer_site(gl, "self_attn.q_proj.weight");
    tp2d::linear2d_forward(a.qkv.data(), a.ln1_full.data(), scratch, a.ln1.data(), P + o.qkv, N, w.dR, w.QKVC,
                           row_in(opts_, site, {w.QC, w.KC, w.KC}));
  }
  {
    MT_TIMED(Kernel::rope);  // RoPE acts on each head alone: the same on any subset of heads
    rope_forward(a.qkv.data(), pos, rope_, N, H, w.QKVl);
    rope_forward(a.qkv.data() + w.Ql, pos, rope_, N, KV, w.QKVl);
  }
  {
    MT_TIMED(Kernel::attention);  // this rank's query heads read its own kv heads (same block of R·C)
    const AttentionDims dims{B, T, T, H, KV, D, w.QKVl, w.QKVl, w.Ql};
    const float* q = a.qkv.data();
    attention_->forward(l, a.att.data(), a.lse.data(), q, q + w.Ql, q + w.Ql + w.Kl, pos, pos, dims,
                        site_of(gl, "attn"));
  }
  {
    MT_TIMED(Kernel::gemm);  // mid = x + o_proj(att)
    const std::string site = tp::layer_site(gl, "self_attn.o_proj.weight");
    tp2d::linear2d_forward(a.mid.data(), a.att_full.data(), scratch, a.att.data(), P + o.o, N, w.QC, w.dR,
                           col_in(opts_, site));
    add_inplace(a.mid.data(), x_in, N * w.dl);
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    tp2d::rmsnorm2d_forward(a.ln2.data(), a.rstd2.data(), a.mid.data(), P + o.ln2, N, w.dl, d, eps, *tp_,
                            norms);
  }
  {
    MT_TIMED(Kernel::gemm);  // gate and up in one GEMM
    const std::string site = tp::layer_site(gl, "mlp.gate_proj.weight");
    tp2d::linear2d_forward(a.gu.data(), a.ln2_full.data(), scratch, a.ln2.data(), P + o.gate_up, N, w.dR,
                           2 * w.FC, row_in(opts_, site, {w.FC, w.FC}));
  }
  {
    MT_TIMED(Kernel::swiglu);
    swiglu_forward(a.h.data(), a.gu.data(), N, w.Fl);
  }
  MT_TIMED(Kernel::gemm);  // x_out = mid + down(h)
  const std::string site = tp::layer_site(gl, "mlp.down_proj.weight");
  if (x_out == nullptr) {  // recomputation: down's backward reads its gathered input, not its output
    tp2d::gather_features(a.h_full.data(), scratch, a.h.data(), N, w.FC, {}, *opts_.tp_r,
                          tp::comm_label(site, "gather_features", "forward", {N, w.Fl}));
    return;
  }
  tp2d::linear2d_forward(x_out, a.h_full.data(), scratch, a.h.data(), P + o.down, N, w.FC, w.dR,
                         col_in(opts_, site));
  add_inplace(x_out, a.mid.data(), N * w.dl);
}

void Llama::layer_backward_2d(int64_t l, const float* P, float* G, LayerActs& a, const float* x_in,
                              float* dres) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  const int64_t gl = table_.stage.first_layer + l;
  const Widths2d w(cfg_, td_, opts_.grid);
  const int64_t N = N_, d = cfg_.d_model;
  Buffers& b = *buf_;
  float* scratch = b.grid.data();
  const std::string norms = tp::layer_site(gl, "input_layernorm.weight");
  // MLP: x = mid + down(h); dres is dL/dx on entry.
  {
    MT_TIMED(Kernel::gemm);  // dh [N, F/(RC)]
    const std::string site = tp::layer_site(gl, "mlp.down_proj.weight");
    tp2d::linear2d_backward(b.dmid.data(), G + o.down, scratch, dres, a.h_full.data(), P + o.down, N, w.FC,
                            w.dR, col_in(opts_, site));
  }
  {
    MT_TIMED(Kernel::swiglu);
    swiglu_backward(b.dgu.data(), b.dmid.data(), a.gu.data(), N, w.Fl);
  }
  store_->poll();
  {
    MT_TIMED(Kernel::gemm);  // dL/d(ln2) [N, d/(RC)]
    const std::string site = tp::layer_site(gl, "mlp.gate_proj.weight");
    tp2d::linear2d_backward(b.dln.data(), G + o.gate_up, scratch, b.dgu.data(), a.ln2_full.data(),
                            P + o.gate_up, N, w.dR, 2 * w.FC, row_in(opts_, site, {w.FC, w.FC}));
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    tp2d::rmsnorm2d_backward(b.dtmp.data(), G + o.ln2, b.dln.data(), a.mid.data(), P + o.ln2, a.rstd2.data(),
                             N, w.dl, d, *tp_, norms);
    add_inplace(dres, b.dtmp.data(), N * w.dl);  // dres is now dL/d(mid)
  }
  store_->poll();
  // Attention: mid = x + o_proj(att).
  {
    MT_TIMED(Kernel::gemm);  // datt [N, H·hd/(RC)]
    const std::string site = tp::layer_site(gl, "self_attn.o_proj.weight");
    tp2d::linear2d_backward(b.dmid.data(), G + o.o, scratch, dres, a.att_full.data(), P + o.o, N, w.QC, w.dR,
                            col_in(opts_, site));
  }
  attention_core_backward(gl, a);  // b.dqkv = d(q|k|v) of this rank's heads, before RoPE
  {
    MT_TIMED(Kernel::gemm);  // dL/d(ln1) [N, d/(RC)]
    const std::string site = tp::layer_site(gl, "self_attn.q_proj.weight");
    tp2d::linear2d_backward(b.dln.data(), G + o.qkv, scratch, b.dqkv.data(), a.ln1_full.data(), P + o.qkv, N,
                            w.dR, w.QKVC, row_in(opts_, site, {w.QC, w.KC, w.KC}));
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    tp2d::rmsnorm2d_backward(b.dtmp.data(), G + o.ln1, b.dln.data(), x_in, P + o.ln1, a.rstd1.data(), N, w.dl,
                             d, *tp_, norms);
    add_inplace(dres, b.dtmp.data(), N * w.dl);  // dres is now dL/dx_in
  }
}

}  // namespace mt

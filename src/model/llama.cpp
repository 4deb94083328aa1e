#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/timer.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"
#include "parallel/context_parallel.h"
#include "parallel/local_store.h"
#include "parallel/tp_comm.h"
#include "parallel/vocab_parallel.h"

namespace mt {

const char* kernel_name(Kernel k) {
  static const char* names[] = {"gemm",   "attention", "rmsnorm",       "rope",
                                "swiglu", "embedding", "cross_entropy", "other"};
  return names[static_cast<int>(k)];
}

// What one layer saves for its backward (N = B·T tokens; Nl = the residual
// stream's tokens here, N / tp under sequence parallelism, else N; the widths
// are this rank's under tensor parallelism).
struct Llama::LayerActs {
  Tensor ln1;       // [N, C]      rmsnorm₁(x), without SP
  Tensor ln1_full;  // [N, C]      with SP: rmsnorm₁ of every rank's tokens, gathered over tp
                    //             (the q|k|v GEMM's input; this rank's own rows are not kept twice)
  Tensor rstd1;     // [Nl]
  Tensor qkv;       // [N, (Hl+2KVl)·D] q and k after RoPE
  Tensor att;       // [N, Hl·D]   attention output (heads concatenated)
  Tensor lse;       // [B, Hl, T]
  Tensor mid;       // [Nl, C]     residual stream after attention
  Tensor ln2;       // [N, C]      without SP
  Tensor ln2_full;  // [N, C]      with SP
  Tensor rstd2;     // [Nl]
  Tensor gu;        // [N, 2Fl]    gate and up
  Tensor h;         // [N, Fl]     swiglu(gate, up)

  LayerActs(const ModelConfig& c, const TpDims& d, int64_t B, int64_t T, int64_t Nl, bool sp) {
    const int64_t N = B * T, C = c.d_model, F = d.ffn, D = c.head_dim();
    const MemKind k = MemKind::activation;
    (sp ? ln1_full : ln1) = Tensor({N, C}, k);
    rstd1 = Tensor({Nl}, k);
    qkv = Tensor({N, (d.heads + 2 * d.kv_heads) * D}, k);
    att = Tensor({N, d.heads * D}, k);
    lse = Tensor({B, d.heads, T}, k);
    mid = Tensor({Nl, C}, k);
    (sp ? ln2_full : ln2) = Tensor({N, C}, k);
    rstd2 = Tensor({Nl}, k);
    gu = Tensor({N, 2 * F}, k);
    h = Tensor({N, F}, k);
  }
};

// What one microbatch in flight keeps between its forward and its backward.
struct Llama::Slot {
  int64_t B = 0, T = 0, N = 0, Nl = 0;
  std::vector<Tensor> resid;      // stage layers + 1 tensors [Nl, C]: the input of each layer, and the output
  std::vector<LayerActs> layers;  // one per stage layer (none with recomputation)
  Tensor lnf, rstdf;              // last stage: final norm [Nl, C], [Nl]; with SP lnf is also the scratch of
                                  // every norm's local output before its all-gather
  Tensor lnf_full;                // last stage, SP: [N, C]
  Tensor logits;                  // last stage: [N, Vl]; the backward turns it into dlogits in place
  Tensor losses, lse_ce;          // last stage: [N]
  std::vector<int32_t> inputs, targets, pos;
  bool has_targets = false;
};

// Scratch shared by every microbatch: the backward's gradients (one backward
// runs at a time) and, with recomputation, the one set of layer activations.
struct Llama::Buffers {
  std::vector<LayerActs> recompute;  // one set, with recomputation
  Tensor norm_out;                   // [Nl, C] SP scratch of a norm's local output (stages without the head)
  Tensor dres, dtmp;                 // [Nl, C] residual-stream gradient and scratch
  Tensor dmid;                       // [N, max(C, Fl, Hl·D)] scratch for a layer's inner gradients
  Tensor dqkv, dgu;                  // [N, (Hl+2KVl)·D], [N, 2Fl]
  // Tensor parallelism: part [N, C] holds a row layer's partial output or a
  // column layer's partial input gradient before the reduction over tp; under
  // SP, dfull [N, C] is a gathered residual gradient and dln [Nl, C] a
  // reduce-scattered one. normg [2, C] collects the norm weights' partial
  // gradients (SP) and kvg [2·KVl·D, C] a replicated kv head's gradient.
  Tensor part, dfull, dln, normg, kvg;
};

Llama::Llama(const ModelConfig& cfg, const ModelOptions& opts, std::unique_ptr<ParamStore> store)
    : cfg_(cfg),
      opts_(opts),
      tp_(opts.tp != nullptr && opts.tp->size() > 1 ? opts.tp : nullptr),
      cp_(opts.cp != nullptr && opts.cp->size() > 1 ? opts.cp : nullptr),
      tpr_{tp_ ? tp_->size() : 1, tp_ ? tp_->rank() : 0},
      td_(tp_dims(cfg, tpr_)),
      table_(make_param_table(cfg, tpr_, opts.stage)),
      units_(make_units(table_, cfg)),
      rope_(cfg.max_seq_len, cfg.head_dim(), cfg.rope_theta),
      store_(store ? std::move(store) : std::make_unique<LocalStore>(units_)),
      buf_(std::make_unique<Buffers>()) {
  cfg_.validate();
  if (!tp_) opts_.sp = false;
  n_stage_layers_ = static_cast<int64_t>(table_.layers.size());
  for (int64_t i = 0; i < n_stage_layers_; ++i) {
    const LayerParamOffsets& o = table_.layers[static_cast<size_t>(i)];
    const int64_t b = units_[static_cast<size_t>(layer_unit(i))].begin;
    rel_.push_back({o.ln1 - b, o.qkv - b, o.o - b, o.ln2 - b, o.gate_up - b, o.down - b});
  }
  if (has_head()) {
    norm_rel_ = table_.norm - units_[static_cast<size_t>(table_.final_unit)].begin;
    head_unit_ = head_in_embed_unit() ? table_.embed_unit : table_.final_unit;
    head_rel_ = table_.lm_head - units_[static_cast<size_t>(head_unit_)].begin;
  }
  if (opts_.max_seq == 0) opts_.max_seq = cfg_.max_seq_len;
  MT_REQUIRE(opts_.max_seq <= cfg_.max_seq_len, ConfigError, "seq_len (", opts_.max_seq,
             ") must not exceed model.max_seq_len (", cfg_.max_seq_len, ")");
  MT_REQUIRE(opts_.max_batch >= 1, ConfigError, "microbatch size (", opts_.max_batch, ") must be at least 1");
  if (sp_on()) {
    MT_REQUIRE(opts_.max_seq % tpr_.size == 0, ConfigError, "train.seq_len (", opts_.max_seq,
               ") must be divisible by parallel.tp (", tpr_.size, ") with parallel.sp = true");
  }
  if (td_.kv_replicas > 1) {  // collective over tp
    kv_group_ = std::make_unique<Group>(tp_->split(static_cast<int>(td_.kv_head0), tpr_.rank, "tp_kv"));
  }
  const int64_t B = opts_.max_batch, T = opts_.max_seq, N = B * T, Nl = sp_on() ? N / tpr_.size : N;
  const int64_t C = cfg_.d_model, F = td_.ffn, Q = td_.heads * cfg_.head_dim();
  const int64_t QKV = Q + 2 * td_.kv_heads * cfg_.head_dim();
  const MemKind k = MemKind::activation;
  Buffers& b = *buf_;
  if (opts_.recompute) b.recompute.emplace_back(cfg_, td_, B, T, Nl, sp_on());
  if (sp_on() && !has_head()) b.norm_out = Tensor({Nl, C}, k);
  b.dres = Tensor({Nl, C}, k);
  b.dtmp = Tensor({Nl, C}, k);
  b.dmid = Tensor({N, std::max({C, F, Q})}, k);
  b.dqkv = Tensor({N, QKV}, k);
  b.dgu = Tensor({N, 2 * F}, k);
  if (tp_) {
    b.part = Tensor({N, C}, k);
    b.kvg = Tensor({2 * td_.kv_heads * cfg_.head_dim(), C}, MemKind::scratch);
  }
  if (sp_on()) {
    b.dfull = Tensor({N, C}, k);
    b.dln = Tensor({Nl, C}, k);
    b.normg = Tensor({2, C}, MemKind::scratch);
  }
  slot(0);  // one microbatch's activations, allocated up front
}

Llama::Slot& Llama::slot(int i) {
  MT_CHECK(i >= 0, "activation slot ", i, " is negative");
  while (static_cast<int>(slots_.size()) <= i) {
    auto sl = std::make_unique<Slot>();
    const int64_t B = opts_.max_batch, T = opts_.max_seq, N = B * T, Nl = sp_on() ? N / tpr_.size : N;
    const int64_t C = cfg_.d_model;
    const MemKind k = MemKind::activation;
    for (int64_t l = 0; l <= n_stage_layers_; ++l)
      sl->resid.emplace_back(std::vector<int64_t>{Nl, C}, k);
    if (!opts_.recompute) {
      sl->layers.reserve(static_cast<size_t>(n_stage_layers_));
      for (int64_t l = 0; l < n_stage_layers_; ++l)
        sl->layers.emplace_back(cfg_, td_, B, T, Nl, sp_on());
    }
    if (has_head()) {
      sl->lnf = Tensor({Nl, C}, k);
      sl->rstdf = Tensor({Nl}, k);
      if (sp_on()) sl->lnf_full = Tensor({N, C}, k);
      sl->logits = Tensor({N, td_.vocab_rows}, k);
      sl->losses = Tensor({N}, k);
      sl->lse_ce = Tensor({N}, k);
    }
    slots_.push_back(std::move(sl));
  }
  return *slots_[static_cast<size_t>(i)];
}

Llama::~Llama() = default;

void Llama::init(uint64_t seed) {
  store_->init_params([&](const ParamSlot& p, int64_t first, int64_t n, float* out) {
    init_param_slice(table_.find(p.name), cfg_, seed, first, n, out);
  });
}

Llama::LayerActs& Llama::acts_for(int64_t i) {
  return opts_.recompute ? buf_->recompute[0] : cur_->layers[static_cast<size_t>(i)];
}

float* Llama::norm_scratch() {
  return has_head() ? cur_->lnf.data() : buf_->norm_out.data();
}

namespace {
// Adds the elapsed time of a scope to one kernel family when profiling.
class KernelScope {
 public:
  KernelScope(KernelTimes& t, Kernel k, bool on) : t_(on ? &t : nullptr), k_(k) {}
  ~KernelScope() {
    if (t_ != nullptr) t_->seconds[static_cast<int>(k_)] += timer_.seconds();
  }

 private:
  KernelTimes* t_;
  Kernel k_;
  Timer timer_;
};

void add_inplace(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    y[i] += x[i];
}
}  // namespace

#define MT_TIMED(kernel) KernelScope scope_##__LINE__(times_, kernel, opts_.profile)

namespace {
std::string site_of(int64_t l, const char* what) {
  return "layer " + std::to_string(l) + " " + what;
}
}  // namespace

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

double Llama::forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) {
  return forward_slot(0, inputs, targets, B, T);
}

void Llama::backward(float dloss) {
  backward_slot(0, dloss);
}

float* Llama::stage_input(int s) {
  MT_CHECK(!has_embed(), "the first stage reads token ids, not an input activation");
  return slot(s).resid[0].data();
}

const float* Llama::stage_output(int s) {
  MT_CHECK(!has_head(), "the last stage ends in the loss, not an output activation");
  return slot(s).resid.back().data();
}

float* Llama::output_grad() {
  MT_CHECK(!has_head(), "the last stage starts its backward from the loss");
  return buf_->dres.data();
}

const float* Llama::input_grad() const {
  MT_CHECK(!has_embed(), "the first stage ends its backward in the embedding");
  return buf_->dres.data();
}

void Llama::use_slot(int s) {
  cur_ = &slot(s);
  B_ = cur_->B;
  T_ = cur_->T;
  N_ = cur_->N;
  Nl_ = cur_->Nl;
}

double Llama::forward_slot(int s, const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) {
  MT_REQUIRE(B >= 1 && B <= opts_.max_batch, ConfigError, "microbatch of ", B,
             " sequences exceeds the model's buffers (", opts_.max_batch, ")");
  MT_REQUIRE(T >= 1 && T <= opts_.max_seq, ConfigError, "sequence length ", T,
             " exceeds the model's buffers (", opts_.max_seq, ")");
  Slot& sl = slot(s);
  sl.B = B;
  sl.T = T;
  sl.N = B * T;
  sl.Nl = sp_on() ? tp::sp_local_tokens(sl.N, *tp_) : sl.N;
  use_slot(s);
  const int64_t N = N_, Nl = Nl_, C = cfg_.d_model, V = cfg_.vocab_size, Vl = td_.vocab_rows;
  if (has_embed()) sl.inputs.assign(inputs, inputs + N);
  sl.has_targets = has_head() && targets != nullptr;
  if (sl.has_targets) sl.targets.assign(targets, targets + N);
  sl.pos.resize(static_cast<size_t>(N));
  if (cp_) {  // this rank's zigzag share of each sequence of T·cp tokens: global positions
    for (int64_t b = 0; b < B; ++b)
      cp::zigzag_positions(sl.pos.data() + b * T, T * cp_->size(), cp_->size(), cp_->rank());
  } else {
    for (int64_t i = 0; i < N; ++i)
      sl.pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % T);
  }
  const tp::SequenceParallel spm = sp_on() ? tp::SequenceParallel::on : tp::SequenceParallel::off;
  if (has_embed()) {
    const int eu = table_.embed_unit;
    const float* E = store_->acquire_params(eu, Pass::forward);
    const float* table = E + (table_.embed - units_[static_cast<size_t>(eu)].begin);
    {
      MT_TIMED(Kernel::embedding);
      if (tp_)
        tp::vocab_embedding_forward(sl.resid[0].data(), sl.inputs.data(), table, N, C, V,
                                    {*tp_, "embed", spm});
      else
        embedding_forward(sl.resid[0].data(), sl.inputs.data(), table, N, C);
    }
    store_->release_params(eu, Pass::forward);
  }
  for (int64_t i = 0; i < n_stage_layers_; ++i) {
    const int unit = layer_unit(i);
    const float* P = store_->acquire_params(unit, Pass::forward);
    layer_forward(i, P, acts_for(i), sl.resid[static_cast<size_t>(i)].data(),
                  sl.resid[static_cast<size_t>(i + 1)].data());
    store_->release_params(unit, Pass::forward);
  }
  if (!has_head()) return 0.0;
  const int fu = table_.final_unit;
  const float* Fp = store_->acquire_params(fu, Pass::forward);
  const float* head = head_unit_ == fu ? Fp : store_->acquire_params(head_unit_, Pass::forward);
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_forward(sl.lnf.data(), sl.rstdf.data(), sl.resid.back().data(), Fp + norm_rel_, Nl, C,
                    static_cast<float>(cfg_.norm_eps));
  }
  const float* xf = column_input(sl.lnf.data(), sl.lnf_full.data(), "head");
  {
    MT_TIMED(Kernel::gemm);
    linear_forward(sl.logits.data(), xf, head + head_rel_, N, C, Vl);
  }
  if (head_unit_ != fu) store_->release_params(head_unit_, Pass::forward);
  store_->release_params(fu, Pass::forward);
  if (!sl.has_targets) return 0.0;
  MT_TIMED(Kernel::cross_entropy);
  const int32_t* tg = sl.targets.data();
  if (tp_)
    tp::vocab_cross_entropy_forward(sl.losses.data(), sl.lse_ce.data(), sl.logits.data(), tg, N, V,
                                    kIgnoreIndex, *tp_, "head");
  else
    cross_entropy_forward(sl.losses.data(), sl.lse_ce.data(), sl.logits.data(), tg, N, V, kIgnoreIndex);
  double sum = 0.0;  // in token order: deterministic (and the same on every tp rank)
  for (int64_t i = 0; i < N; ++i)
    sum += sl.losses.data()[i];
  return sum;
}

const float* Llama::logits() const {
  MT_CHECK(tp_ == nullptr, "logits() needs the whole vocabulary: not available under tensor parallelism");
  MT_CHECK(has_head(), "logits() needs the stage with the LM head");
  return slots_[0]->logits.data();
}

void Llama::backward_slot(int s, float dloss) {
  use_slot(s);
  Slot& sl = *cur_;
  const int64_t N = N_, Nl = Nl_, C = cfg_.d_model, V = cfg_.vocab_size, Vl = td_.vocab_rows;
  Buffers& b = *buf_;
  const bool sp = sp_on();
  const bool tied_here = head_unit_ >= 0 && head_unit_ == table_.embed_unit;
  float* Eg =
      nullptr;  // a tied head's gradient goes to the embedding unit, acquired until its backward is done
  if (has_head()) {
    MT_CHECK(sl.has_targets, "backward needs a forward with targets");
    {
      MT_TIMED(Kernel::cross_entropy);
      const int32_t* tg = sl.targets.data();
      if (tp_)
        tp::vocab_cross_entropy_backward(sl.logits.data(), sl.logits.data(), sl.lse_ce.data(), tg, dloss, N,
                                         V, kIgnoreIndex, *tp_);
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
    {
      MT_TIMED(Kernel::gemm);
      linear_backward(nullptr, head_grad + head_rel_, sl.logits.data(),
                      sp ? sl.lnf_full.data() : sl.lnf.data(), head + head_rel_, N, C, Vl);
    }
    const float* dlnf = column_dinput(sl.logits.data(), head + head_rel_, Vl, "head");
    {
      MT_TIMED(Kernel::rmsnorm);
      float* gnorm = sp ? b.normg.data() : Fg + norm_rel_;
      if (sp) b.normg.zero();
      rmsnorm_backward(b.dres.data(), gnorm, dlnf, sl.resid.back().data(), Fp + norm_rel_, sl.rstdf.data(),
                       Nl, C);
      if (sp) {
        tp_->all_reduce(gnorm, C, tp::comm_label("final norm", "sp weight grads", "backward", {1, C}));
        add_inplace(Fg + norm_rel_, gnorm, C);
      }
    }
    if (tied_here) store_->release_params(head_unit_, Pass::backward);
    store_->release_grads(fu);
    store_->release_params(fu, Pass::backward);
  }
  // Otherwise dres holds the gradient of this stage's output (output_grad()).
  for (int64_t i = n_stage_layers_ - 1; i >= 0; --i) {
    const int unit = layer_unit(i);
    const float* x_in = sl.resid[static_cast<size_t>(i)].data();
    const float* P = store_->acquire_params(unit, Pass::backward);
    float* G = store_->acquire_grads(unit);
    LayerActs& a = acts_for(i);
    if (opts_.recompute) {
      // Same kernels on the same input: the recomputed activations are bitwise
      // the ones the forward produced.
      layer_forward(i, P, a, x_in, nullptr);
    }
    layer_backward(i, P, G, a, x_in, b.dres.data());
    store_->release_grads(unit);
    store_->release_params(unit, Pass::backward);
  }
  if (has_embed()) {
    const int eu = table_.embed_unit;
    if (!tied_here) Eg = store_->acquire_grads(eu);
    {
      float* dtable = Eg + (table_.embed - units_[static_cast<size_t>(eu)].begin);
      MT_TIMED(Kernel::embedding);
      if (tp_)
        tp::vocab_embedding_backward(
            dtable, b.dres.data(), sl.inputs.data(), N, C, V,
            {*tp_, "embed", sp ? tp::SequenceParallel::on : tp::SequenceParallel::off});
      else
        embedding_backward(dtable, b.dres.data(), sl.inputs.data(), N, C);
    }
    store_->release_grads(eu);
  }
  sl.has_targets = false;
}

}  // namespace mt

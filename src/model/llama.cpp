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
#include "parallel/local_store.h"

namespace mt {

const char* kernel_name(Kernel k) {
  static const char* names[] = {"gemm",   "attention", "rmsnorm",       "rope",
                                "swiglu", "embedding", "cross_entropy", "other"};
  return names[static_cast<int>(k)];
}

// What one layer saves for its backward (N = B·T tokens).
struct Llama::LayerActs {
  Tensor ln1;    // [N, C]      rmsnorm₁(x)
  Tensor rstd1;  // [N]
  Tensor qkv;    // [N, (H+2KV)·D] q and k after RoPE
  Tensor att;    // [N, H·D]    attention output (heads concatenated)
  Tensor lse;    // [B, H, T]
  Tensor mid;    // [N, C]      residual stream after attention
  Tensor ln2;    // [N, C]
  Tensor rstd2;  // [N]
  Tensor gu;     // [N, 2F]     gate and up
  Tensor h;      // [N, F]      swiglu(gate, up)

  LayerActs(const ModelConfig& c, int64_t B, int64_t T) {
    const int64_t N = B * T, C = c.d_model, F = c.ffn_hidden;
    const MemKind k = MemKind::activation;
    ln1 = Tensor({N, C}, k);
    rstd1 = Tensor({N}, k);
    qkv = Tensor({N, c.qkv_dim()}, k);
    att = Tensor({N, c.q_dim()}, k);
    lse = Tensor({B, c.n_heads, T}, k);
    mid = Tensor({N, C}, k);
    ln2 = Tensor({N, C}, k);
    rstd2 = Tensor({N}, k);
    gu = Tensor({N, 2 * F}, k);
    h = Tensor({N, F}, k);
  }
};

struct Llama::Buffers {
  std::vector<Tensor> resid;      // n_layers + 1 tensors [N, C]: the input of each layer, and x_L
  std::vector<LayerActs> layers;  // one per layer, or a single shared one with recomputation
  Tensor lnf, rstdf;              // final norm [N, C], [N]
  Tensor logits;                  // [N, V]; the backward turns it into dlogits in place
  Tensor losses, lse_ce;          // [N]
  Tensor dres, dtmp;              // [N, C] residual-stream gradient and scratch
  Tensor dmid;                    // [N, max(C, F, H·D)] scratch for a layer's inner gradients
  Tensor dqkv, dgu;               // [N, (H+2KV)·D], [N, 2F]
  std::vector<int32_t> inputs, targets, pos;
};

Llama::Llama(const ModelConfig& cfg, const ModelOptions& opts, std::unique_ptr<ParamStore> store)
    : cfg_(cfg),
      opts_(opts),
      table_(make_param_table(cfg)),
      units_(make_units(table_, cfg)),
      rope_(cfg.max_seq_len, cfg.head_dim(), cfg.rope_theta),
      store_(store ? std::move(store) : std::make_unique<LocalStore>(units_)),
      buf_(std::make_unique<Buffers>()) {
  cfg_.validate();
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const LayerParamOffsets& o = table_.layers[static_cast<size_t>(l)];
    const int64_t b = units_[static_cast<size_t>(l + 1)].begin;
    rel_.push_back({o.ln1 - b, o.qkv - b, o.o - b, o.ln2 - b, o.gate_up - b, o.down - b});
  }
  norm_rel_ = table_.norm - units_.back().begin;
  head_rel_ = cfg_.tie_embeddings ? table_.lm_head - units_[0].begin : table_.lm_head - units_.back().begin;
  if (opts_.max_seq == 0) opts_.max_seq = cfg_.max_seq_len;
  MT_REQUIRE(opts_.max_seq <= cfg_.max_seq_len, ConfigError, "seq_len (", opts_.max_seq,
             ") must not exceed model.max_seq_len (", cfg_.max_seq_len, ")");
  MT_REQUIRE(opts_.max_batch >= 1, ConfigError, "microbatch size (", opts_.max_batch, ") must be at least 1");
  const int64_t B = opts_.max_batch, T = opts_.max_seq, N = B * T;
  const int64_t C = cfg_.d_model, F = cfg_.ffn_hidden, V = cfg_.vocab_size;
  const MemKind k = MemKind::activation;
  Buffers& b = *buf_;
  for (int64_t l = 0; l <= cfg_.n_layers; ++l)
    b.resid.emplace_back(std::vector<int64_t>{N, C}, k);
  const int64_t n_sets = opts_.recompute ? 1 : cfg_.n_layers;
  b.layers.reserve(static_cast<size_t>(n_sets));
  for (int64_t l = 0; l < n_sets; ++l)
    b.layers.emplace_back(cfg_, B, T);
  b.lnf = Tensor({N, C}, k);
  b.rstdf = Tensor({N}, k);
  b.logits = Tensor({N, V}, k);
  b.losses = Tensor({N}, k);
  b.lse_ce = Tensor({N}, k);
  b.dres = Tensor({N, C}, k);
  b.dtmp = Tensor({N, C}, k);
  b.dmid = Tensor({N, std::max({C, F, cfg_.q_dim()})}, k);
  b.dqkv = Tensor({N, cfg_.qkv_dim()}, k);
  b.dgu = Tensor({N, 2 * F}, k);
}

Llama::~Llama() = default;

void Llama::init(uint64_t seed) {
  store_->init_params([&](const ParamSlot& p, int64_t first, int64_t n, float* out) {
    init_param_slice(table_.find(p.name), cfg_, seed, first, n, out);
  });
}

Llama::LayerActs& Llama::acts_for(int64_t l) {
  return buf_->layers[static_cast<size_t>(opts_.recompute ? 0 : l)];
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

void Llama::layer_forward(int64_t l, const float* P, LayerActs& a, const float* x_in, float* x_out) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  const int64_t B = B_, T = T_, N = B * T, C = cfg_.d_model, F = cfg_.ffn_hidden;
  const int64_t QKV = cfg_.qkv_dim(), Q = cfg_.q_dim();
  const int32_t* pos = buf_->pos.data();
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_forward(a.ln1.data(), a.rstd1.data(), x_in, P + o.ln1, N, C, static_cast<float>(cfg_.norm_eps));
  }
  {
    MT_TIMED(Kernel::gemm);
    linear_forward(a.qkv.data(), a.ln1.data(), P + o.qkv, N, C, QKV);  // q, k, v in one GEMM
  }
  {
    MT_TIMED(Kernel::rope);
    rope_forward(a.qkv.data(), pos, rope_, N, cfg_.n_heads, QKV);         // q
    rope_forward(a.qkv.data() + Q, pos, rope_, N, cfg_.n_kv_heads, QKV);  // k
  }
  {
    MT_TIMED(Kernel::attention);
    AttentionDims d{B, T, T, cfg_.n_heads, cfg_.n_kv_heads, cfg_.head_dim(), QKV, QKV, Q};
    const float* q = a.qkv.data();
    attention_forward(a.att.data(), a.lse.data(), q, q + Q, q + Q + cfg_.kv_dim(), pos, pos, d);
  }
  {
    MT_TIMED(Kernel::gemm);
    std::memcpy(a.mid.data(), x_in, static_cast<size_t>(N * C) * sizeof(float));
    linear_forward(a.mid.data(), a.att.data(), P + o.o, N, Q, C, Out::add);  // residual add fused
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_forward(a.ln2.data(), a.rstd2.data(), a.mid.data(), P + o.ln2, N, C,
                    static_cast<float>(cfg_.norm_eps));
  }
  {
    MT_TIMED(Kernel::gemm);
    linear_forward(a.gu.data(), a.ln2.data(), P + o.gate_up, N, C, 2 * F);  // gate and up in one GEMM
  }
  {
    MT_TIMED(Kernel::swiglu);
    swiglu_forward(a.h.data(), a.gu.data(), N, F);
  }
  if (x_out == nullptr) return;  // recomputation needs the activations, not the output
  {
    MT_TIMED(Kernel::gemm);
    std::memcpy(x_out, a.mid.data(), static_cast<size_t>(N * C) * sizeof(float));
    linear_forward(x_out, a.h.data(), P + o.down, N, F, C, Out::add);
  }
}

void Llama::layer_backward(int64_t l, const float* P, float* G, LayerActs& a, const float* x_in,
                           float* dres) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  const int64_t B = B_, T = T_, N = B * T, C = cfg_.d_model, F = cfg_.ffn_hidden;
  const int64_t QKV = cfg_.qkv_dim(), Q = cfg_.q_dim();
  const int32_t* pos = buf_->pos.data();
  Buffers& b = *buf_;
  // MLP: x = mid + down(h); dres is dL/dx on entry.
  {
    MT_TIMED(Kernel::gemm);
    linear_backward(b.dmid.data(), G + o.down, dres, a.h.data(), P + o.down, N, F, C);  // dh
  }
  {
    MT_TIMED(Kernel::swiglu);
    swiglu_backward(b.dgu.data(), b.dmid.data(), a.gu.data(), N, F);
  }
  store_->poll();
  {
    MT_TIMED(Kernel::gemm);
    linear_backward(b.dmid.data(), G + o.gate_up, b.dgu.data(), a.ln2.data(), P + o.gate_up, N, C, 2 * F);
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_backward(b.dtmp.data(), G + o.ln2, b.dmid.data(), a.mid.data(), P + o.ln2, a.rstd2.data(), N, C);
    add_inplace(dres, b.dtmp.data(), N * C);  // dres is now dL/d(mid)
  }
  store_->poll();
  // Attention: mid = x + o_proj(att).
  {
    MT_TIMED(Kernel::gemm);
    linear_backward(b.dmid.data(), G + o.o, dres, a.att.data(), P + o.o, N, Q, C);  // datt
  }
  {
    MT_TIMED(Kernel::attention);
    b.dqkv.zero();  // attention_backward accumulates
    AttentionDims d{B, T, T, cfg_.n_heads, cfg_.n_kv_heads, cfg_.head_dim(), QKV, QKV, Q};
    const float* q = a.qkv.data();
    float* dq = b.dqkv.data();
    attention_backward(dq, dq + Q, dq + Q + cfg_.kv_dim(), b.dmid.data(), a.att.data(), a.lse.data(), q,
                       q + Q, q + Q + cfg_.kv_dim(), pos, pos, d);
  }
  store_->poll();
  {
    MT_TIMED(Kernel::rope);
    rope_backward(b.dqkv.data(), pos, rope_, N, cfg_.n_heads, QKV);
    rope_backward(b.dqkv.data() + Q, pos, rope_, N, cfg_.n_kv_heads, QKV);
  }
  {
    MT_TIMED(Kernel::gemm);
    linear_backward(b.dmid.data(), G + o.qkv, b.dqkv.data(), a.ln1.data(), P + o.qkv, N, C, QKV);
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_backward(b.dtmp.data(), G + o.ln1, b.dmid.data(), x_in, P + o.ln1, a.rstd1.data(), N, C);
    add_inplace(dres, b.dtmp.data(), N * C);  // dres is now dL/dx_in
  }
}

double Llama::forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) {
  MT_REQUIRE(B >= 1 && B <= opts_.max_batch, ConfigError, "microbatch of ", B,
             " sequences exceeds the model's buffers (", opts_.max_batch, ")");
  MT_REQUIRE(T >= 1 && T <= opts_.max_seq, ConfigError, "sequence length ", T,
             " exceeds the model's buffers (", opts_.max_seq, ")");
  B_ = B;
  T_ = T;
  const int64_t N = B * T, C = cfg_.d_model, V = cfg_.vocab_size;
  Buffers& b = *buf_;
  b.inputs.assign(inputs, inputs + N);
  b.targets.assign(targets ? targets : inputs, (targets ? targets : inputs) + N);
  targets_ = targets ? b.targets.data() : nullptr;
  b.pos.resize(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    b.pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % T);
  {
    const float* E = store_->acquire_params(0, Pass::forward);
    MT_TIMED(Kernel::embedding);
    embedding_forward(b.resid[0].data(), b.inputs.data(), E + (table_.embed - units_[0].begin), N, C);
  }
  store_->release_params(0, Pass::forward);
  for (int64_t l = 0; l < cfg_.n_layers; ++l) {
    const int unit = static_cast<int>(l) + 1;
    const float* P = store_->acquire_params(unit, Pass::forward);
    layer_forward(l, P, acts_for(l), b.resid[static_cast<size_t>(l)].data(),
                  b.resid[static_cast<size_t>(l + 1)].data());
    store_->release_params(unit, Pass::forward);
  }
  const float* Fp = store_->acquire_params(final_unit(), Pass::forward);
  const float* head = cfg_.tie_embeddings ? store_->acquire_params(0, Pass::forward) : Fp;
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_forward(b.lnf.data(), b.rstdf.data(), b.resid.back().data(), Fp + norm_rel_, N, C,
                    static_cast<float>(cfg_.norm_eps));
  }
  {
    MT_TIMED(Kernel::gemm);
    linear_forward(b.logits.data(), b.lnf.data(), head + head_rel_, N, C, V);
  }
  if (cfg_.tie_embeddings) store_->release_params(0, Pass::forward);
  store_->release_params(final_unit(), Pass::forward);
  if (targets_ == nullptr) return 0.0;
  MT_TIMED(Kernel::cross_entropy);
  cross_entropy_forward(b.losses.data(), b.lse_ce.data(), b.logits.data(), targets_, N, V, kIgnoreIndex);
  double sum = 0.0;  // in token order: deterministic
  for (int64_t i = 0; i < N; ++i)
    sum += b.losses.data()[i];
  return sum;
}

const float* Llama::logits() const {
  return buf_->logits.data();
}

void Llama::backward(float dloss) {
  MT_CHECK(targets_ != nullptr, "backward needs a forward with targets");
  const int64_t N = B_ * T_, C = cfg_.d_model, V = cfg_.vocab_size;
  Buffers& b = *buf_;
  const bool tied = cfg_.tie_embeddings;
  {
    MT_TIMED(Kernel::cross_entropy);
    cross_entropy_backward(b.logits.data(), b.logits.data(), b.lse_ce.data(), targets_, dloss, N, V,
                           kIgnoreIndex);
  }
  // Final norm and LM head. A tied head's gradient goes to unit 0, which stays
  // acquired until the embedding's backward has added its part too.
  const float* Fp = store_->acquire_params(final_unit(), Pass::backward);
  float* Fg = store_->acquire_grads(final_unit());
  const float* head = tied ? store_->acquire_params(0, Pass::backward) : Fp;
  float* Eg = tied ? store_->acquire_grads(0) : nullptr;
  float* head_grad = tied ? Eg : Fg;
  {
    MT_TIMED(Kernel::gemm);
    linear_backward(b.dtmp.data(), head_grad + head_rel_, b.logits.data(), b.lnf.data(), head + head_rel_, N,
                    C, V);
  }
  {
    MT_TIMED(Kernel::rmsnorm);
    rmsnorm_backward(b.dres.data(), Fg + norm_rel_, b.dtmp.data(), b.resid.back().data(), Fp + norm_rel_,
                     b.rstdf.data(), N, C);
  }
  if (tied) store_->release_params(0, Pass::backward);
  store_->release_grads(final_unit());
  store_->release_params(final_unit(), Pass::backward);
  for (int64_t l = cfg_.n_layers - 1; l >= 0; --l) {
    const int unit = static_cast<int>(l) + 1;
    const float* x_in = b.resid[static_cast<size_t>(l)].data();
    const float* P = store_->acquire_params(unit, Pass::backward);
    float* G = store_->acquire_grads(unit);
    LayerActs& a = acts_for(l);
    if (opts_.recompute) {
      // Same kernels on the same input: the recomputed activations are bitwise
      // the ones the forward produced.
      layer_forward(l, P, a, x_in, nullptr);
    }
    layer_backward(l, P, G, a, x_in, b.dres.data());
    store_->release_grads(unit);
    store_->release_params(unit, Pass::backward);
  }
  if (!tied) Eg = store_->acquire_grads(0);
  {
    MT_TIMED(Kernel::embedding);
    embedding_backward(Eg + (table_.embed - units_[0].begin), b.dres.data(), b.inputs.data(), N, C);
  }
  store_->release_grads(0);
  targets_ = nullptr;
}

}  // namespace mt

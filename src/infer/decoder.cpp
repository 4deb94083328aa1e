#include "infer/decoder.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"

namespace mt {
namespace {
template <typename T>
T* sized(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}
}  // namespace

Decoder::Decoder(const Llama& model, KvCache& cache)
    : model_(model),
      cache_(cache),
      cfg_(model.config()),
      scaling_(cfg_.rope()),
      rotate_at_attention_(scaling_.type == RopeType::dynamic),
      rope_(cfg_.rope_table(cfg_.max_seq_len)),
      rope_len_(rope_) {
  MT_REQUIRE(model.tp_group() == nullptr && model.has_embed() && model.has_head(), ConfigError,
             "generation needs the whole model in one process (tensor- and pipeline-parallel generation are "
             "not built yet)");
  MT_REQUIRE(cache.row() == cfg_.kv_dim(), ConfigError, "the KV cache's rows (", cache.row(),
             " floats) are not the model's kv_heads × head_dim (", cfg_.kv_dim(), ")");
  MT_REQUIRE(cache.capacity() <= cfg_.max_seq_len, ConfigError, "the KV cache's capacity (", cache.capacity(),
             ") exceeds the model's max_seq_len (", cfg_.max_seq_len, ")");
  kpos_.resize(static_cast<size_t>(cache.capacity()));
  for (size_t i = 0; i < kpos_.size(); ++i)
    kpos_[i] = static_cast<int32_t>(i);
}

const RopeTable& Decoder::rope_for(int64_t seq_len) {
  if (!rotate_at_attention_) return rope_;
  if (rope_len_.seq_len() != seq_len) rope_len_ = cfg_.rope_table(seq_len);
  return rope_len_;
}

void Decoder::step(std::span<const DecodeRows> entries, float* logits, bool all_logits) {
  const int64_t C = cfg_.d_model, V = cfg_.vocab_size;
  const ParamTable& t = model_.param_table();
  const float* P = model_.params();
  M_ = 0;
  std::vector<int32_t> ids;
  for (const DecodeRows& e : entries) {
    MT_REQUIRE(e.n >= 1 && e.seq >= 0 && e.seq < cache_.batch(), ConfigError, "decode step: sequence ", e.seq,
               " with ", e.n, " tokens is not in the batch of ", cache_.batch());
    MT_REQUIRE(cache_.length(e.seq) + e.n <= cache_.capacity(), ConfigError, "sequence ", e.seq,
               " would hold ", cache_.length(e.seq) + e.n, " tokens but the KV cache has room for ",
               cache_.capacity());
    for (int64_t i = 0; i < e.n; ++i) {
      MT_REQUIRE(e.ids[i] >= 0 && e.ids[i] < V, ConfigError, "token id ", e.ids[i],
                 " is outside the model's ", V, "-token vocabulary");
      ids.push_back(e.ids[i]);
      sized(pos_, M_ + 1)[M_] = static_cast<int32_t>(cache_.length(e.seq) + i);
      ++M_;
    }
  }
  embedding_forward(sized(x_, M_ * C), ids.data(), P + t.embed, M_, C);
  for (int64_t l = 0; l < cfg_.n_layers; ++l)
    layer(l, entries);
  for (const DecodeRows& e : entries)
    cache_.advance(e.seq, e.n);
  // The rows whose logits are asked for, through the final norm and the head.
  std::vector<int64_t> rows;
  int64_t r = 0;
  for (const DecodeRows& e : entries) {
    for (int64_t i = all_logits ? 0 : e.n - 1; i < e.n; ++i)
      rows.push_back(r + i);
    r += e.n;
  }
  const int64_t R = static_cast<int64_t>(rows.size());
  float* sel = sized(mid_, R * C);
  for (int64_t i = 0; i < R; ++i)
    std::memcpy(sel + i * C, x_.data() + rows[static_cast<size_t>(i)] * C,
                static_cast<size_t>(C) * sizeof(float));
  rmsnorm_forward(sized(ln_, R * C), sized(rstd_, R), sel, P + t.norm, R, C,
                  static_cast<float>(cfg_.norm_eps));
  linear_forward(logits, ln_.data(), P + t.lm_head, R, C, V);
}

void Decoder::layer(int64_t l, std::span<const DecodeRows> entries) {
  const LayerParamOffsets& o = model_.param_table().layers[static_cast<size_t>(l)];
  const float* P = model_.params();
  const int64_t M = M_, C = cfg_.d_model, F = cfg_.ffn_hidden, Q = cfg_.q_dim(), QKV = cfg_.qkv_dim();
  const float eps = static_cast<float>(cfg_.norm_eps);
  rmsnorm_forward(sized(ln_, M * C), sized(rstd_, M), x_.data(), P + o.ln1, M, C, eps);
  linear_forward(sized(qkv_, M * QKV), ln_.data(), P + o.qkv, M, C, QKV);
  sized(att_, M * Q);
  int64_t r0 = 0;
  for (const DecodeRows& e : entries) {
    attend(l, e, r0);
    r0 += e.n;
  }
  float* mid = sized(mid_, M * C);  // mid = x + o_proj(att)
  std::memcpy(mid, x_.data(), static_cast<size_t>(M * C) * sizeof(float));
  linear_forward(mid, att_.data(), P + o.o, M, Q, C, Out::add);
  rmsnorm_forward(ln_.data(), rstd_.data(), mid, P + o.ln2, M, C, eps);
  linear_forward(sized(gu_, M * 2 * F), ln_.data(), P + o.gate_up, M, C, 2 * F);
  swiglu_forward(sized(h_, M * F), gu_.data(), M, F);
  std::memcpy(x_.data(), mid, static_cast<size_t>(M * C) * sizeof(float));  // x = mid + down(h)
  linear_forward(x_.data(), h_.data(), P + o.down, M, F, C, Out::add);
}

// Entry e's rows [r0, r0 + n) of qkv: rotate, cache, attend.
void Decoder::attend(int64_t l, const DecodeRows& e, int64_t r0) {
  const int64_t H = cfg_.n_heads, KV = cfg_.n_kv_heads, D = cfg_.head_dim(), Q = cfg_.q_dim(),
                QKV = cfg_.qkv_dim(), KVD = cfg_.kv_dim();
  const int64_t len = cache_.length(e.seq), L = len + e.n;
  float* q = qkv_.data() + r0 * QKV;
  const int32_t* pos = pos_.data() + r0;
  const RopeTable& rope = rope_for(L);
  rope_forward(q, pos, rope, e.n, H, QKV);
  if (!rotate_at_attention_) rope_forward(q + Q, pos, rope, e.n, KV, QKV);
  cache_.write(l, e.seq, len, e.n, q + Q, q + Q + KVD, QKV);
  const float* k = cache_.keys(l, e.seq, L, kbuf_);
  const float* v = cache_.values(l, e.seq, L, vbuf_);
  if (rotate_at_attention_) {  // every cached key, with this length's frequencies
    float* kr = sized(krot_, L * KVD);
    std::memcpy(kr, k, static_cast<size_t>(L * KVD) * sizeof(float));
    rope_forward(kr, kpos_.data(), rope, L, KV, KVD);
    k = kr;
  }
  const AttentionDims d{1, e.n, L, H, KV, D, QKV, KVD, Q};
  attention_forward(att_.data() + r0 * Q, sized(lse_, H * e.n), q, k, v, pos, kpos_.data(), d);
}

}  // namespace mt

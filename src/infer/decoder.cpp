#include "infer/decoder.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/embedding.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp_plan.h"

namespace mt {

Decoder::Decoder(const Llama& model, KvCache& cache, Group* cp, cp::CpImpl cp_impl)
    : model_(model),
      cache_(cache),
      cp_(cp != nullptr && cp->size() > 1 ? cp : nullptr),
      cp_impl_(cp_impl),
      cfg_(model.config()),
      td_(tp_dims(cfg_, model.tp_rank())),
      vocab_(tp::vocab_shard(cfg_.vocab_size, model.tp_rank().size, model.tp_rank().rank)),
      scaling_(cfg_.rope()),
      rotate_at_attention_(scaling_.type == RopeType::dynamic),
      rope_(cfg_.rope_table(scaling_, cfg_.max_seq_len)),
      rope_len_(rope_) {
  const ParamTable& t = model.param_table();
  MT_REQUIRE(!cfg_.moe(), ConfigError, "the cached decoder runs dense models only (this one has ",
             cfg_.n_experts, " experts)");
  MT_REQUIRE(cache.row() == td_.kv_heads * cfg_.head_dim(), ConfigError, "the KV cache's rows (", cache.row(),
             " floats) are not this rank's kv heads × head_dim (", td_.kv_heads * cfg_.head_dim(), ")");
  MT_REQUIRE(cache.layers() == static_cast<int64_t>(t.layers.size()), ConfigError, "the KV cache has ",
             cache.layers(), " layers but this stage runs ", t.layers.size());
  MT_REQUIRE(cache.shards() == (cp_ != nullptr ? cp_->size() : 1), ConfigError, "the KV cache has ",
             cache.shards(), " position shards but cp has ", cp_ != nullptr ? cp_->size() : 1, " ranks");
  MT_REQUIRE(cache.capacity() <= cfg_.max_seq_len, ConfigError, "the KV cache's capacity (", cache.capacity(),
             ") exceeds the model's max_seq_len (", cfg_.max_seq_len, ")");
  kpos_.resize(static_cast<size_t>(cache.slots()));
  for (size_t j = 0; j < kpos_.size(); ++j)
    kpos_[j] = static_cast<int32_t>(cache.position_of(static_cast<int64_t>(j)));
}

const RopeTable& Decoder::rope_for(int64_t seq_len) {
  if (!rotate_at_attention_) return rope_;
  if (rope_len_.seq_len() != seq_len) rope_len_ = cfg_.rope_table(scaling_, seq_len);
  return rope_len_;
}

void Decoder::stage_step(std::span<const DecodeRows> entries, const float* hidden, float* out,
                         bool all_logits) {
  const int64_t C = cfg_.d_model;
  M_ = 0;
  ids_.clear();
  e0_.clear();
  bool chunk = false;
  for (const DecodeRows& e : entries) {
    e0_.push_back(M_);
    chunk = chunk || e.n > 1;
    MT_REQUIRE(e.n >= 1 && e.seq >= 0 && e.seq < cache_.batch(), ConfigError, "decode step: sequence ", e.seq,
               " with ", e.n, " tokens is not in the batch of ", cache_.batch());
    cache_.check_room(e.seq, e.n);
    for (int64_t i = 0; i < e.n; ++i) {
      MT_REQUIRE(e.ids[i] >= 0 && e.ids[i] < cfg_.vocab_size, ConfigError, "token id ", e.ids[i],
                 " is outside the model's ", cfg_.vocab_size, "-token vocabulary");
      ids_.push_back(e.ids[i]);
      sized(pos_, M_ + 1)[M_] = static_cast<int32_t>(cache_.length(e.seq) + i);
      ++M_;
    }
  }
  if (model_.has_embed()) {
    embed();
  } else {
    MT_CHECK(hidden != nullptr, "a stage without the embedding reads the previous stage's hidden state");
    std::memcpy(sized(x_, M_ * C), hidden, static_cast<size_t>(M_ * C) * sizeof(float));
  }
  ring_ = cp_ != nullptr && cp_impl_ == cp::CpImpl::ring && chunk;
  const int R = cp_ != nullptr ? cp_->size() : 1, me = cp_ != nullptr ? cp_->rank() : 0;
  mp_ = (M_ + R - 1) / R;
  m0_ = std::min<int64_t>(M_, me * mp_);
  mb_ = std::min<int64_t>(M_, m0_ + mp_) - m0_;
  if (m0_ > 0 && mb_ > 0)  // this rank's block to the front of the residual stream
    std::memmove(x_.data(), x_.data() + m0_ * C, static_cast<size_t>(mb_ * C) * sizeof(float));
  for (int64_t l = 0; l < static_cast<int64_t>(model_.param_table().layers.size()); ++l)
    layer(l, entries);
  for (const DecodeRows& e : entries)
    cache_.advance(e.seq, e.n);
  if (cp_ != nullptr) {  // every row's hidden state on every cp rank, for the head or the next stage
    std::vector<float> block(x_.begin(), x_.begin() + mb_ * C);
    gather_blocks(block.data(), C, x_, "generate cp hidden");
  }
  if (model_.has_head()) {
    head(entries, out, all_logits);
  } else {
    std::memcpy(out, x_.data(), static_cast<size_t>(M_ * C) * sizeof(float));
  }
}

void Decoder::embed() {
  const int64_t C = cfg_.d_model;
  const float* table = model_.params() + model_.param_table().embed;
  if (model_.tp_group() == nullptr) {
    embedding_forward(sized(x_, M_ * C), ids_.data(), table, M_, C);
    return;
  }
  const tp::TpLayer layer{model_.tp_group(), "embed", tp::SequenceParallel::off};
  tp::vocab_embedding_forward(sized(x_, M_ * C), sized(part_, M_ * C), ids_.data(), table, M_, C,
                              cfg_.vocab_size, layer);
}

// The rows whose logits are asked for, through the final norm and this rank's rows of the head.
void Decoder::head(std::span<const DecodeRows> entries, float* logits, bool all_logits) {
  const int64_t C = cfg_.d_model;
  const ParamTable& t = model_.param_table();
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
  rmsnorm_forward(sized(ln_, R * C), sized(rstd_, R), sel, model_.params() + t.norm, R, C,
                  static_cast<float>(cfg_.norm_eps));
  linear_forward(logits, ln_.data(), model_.params() + t.lm_head, R, C, vocab_.rows);
}

void Decoder::layer(int64_t l, std::span<const DecodeRows> entries) {
  const LayerParamOffsets& o = model_.param_table().layers[static_cast<size_t>(l)];
  const int64_t gl = model_.param_table().stage.first_layer + l;  // the layer's index in the model
  const float* P = model_.params();
  const int64_t M = M_, Mb = mb_, C = cfg_.d_model, F = td_.ffn, D = cfg_.head_dim();
  const int64_t Q = td_.heads * D, QKV = Q + 2 * td_.kv_heads * D;
  const float eps = static_cast<float>(cfg_.norm_eps);
  auto tp_layer = [&](const std::string& site) {
    return tp::TpLayer{model_.tp_group(), site, tp::SequenceParallel::off};
  };
  rmsnorm_forward(sized(ln_, Mb * C), sized(rstd_, Mb), x_.data(), P + o.ln1, Mb, C, eps);
  float* qkv_block = cp_ != nullptr ? sized(mid_, std::max<int64_t>(Mb, 1) * QKV) : sized(qkv_, M * QKV);
  tp::column_parallel_forward(qkv_block, nullptr, ln_.data(), P + o.qkv, Mb, C, QKV,
                              tp_layer(tp::layer_site(gl, "self_attn.q_proj.weight")));
  sized(att_, M * Q);
  sized(lse_, td_.heads * M);
  if (ring_) {
    ring_attention(l, entries, qkv_block);
  } else {
    if (cp_ != nullptr) gather_blocks(qkv_block, QKV, qkv_, "generate cp qkv");  // every row's q|k|v
    int64_t r0 = 0;
    for (const DecodeRows& e : entries) {
      attend(l, e, r0);
      r0 += e.n;
    }
    if (cp_ != nullptr) merge_over_cp(entries);
  }
  float* mid = sized(mid_, M * C);  // mid = x + o_proj(att), this rank's block
  tp::row_parallel_forward(mid, sized(part_, M * C), att_.data() + m0_ * Q, P + o.o, Mb, Q, C,
                           tp_layer(tp::layer_site(gl, "self_attn.o_proj.weight")), x_.data());
  rmsnorm_forward(ln_.data(), rstd_.data(), mid, P + o.ln2, Mb, C, eps);
  tp::column_parallel_forward(sized(gu_, M * 2 * F), nullptr, ln_.data(), P + o.gate_up, Mb, C, 2 * F,
                              tp_layer(tp::layer_site(gl, "mlp.gate_proj.weight")));
  swiglu_forward(sized(h_, M * F), gu_.data(), Mb, F);
  tp::row_parallel_forward(x_.data(), part_.data(), h_.data(), P + o.down, Mb, F, C,
                           tp_layer(tp::layer_site(gl, "mlp.down_proj.weight")), mid);  // x = mid + down(h)
}

void Decoder::gather_blocks(const float* src, int64_t width, std::vector<float>& dst, const char* label) {
  const int64_t R = cp_->size(), per = mp_ * width;
  std::vector<float> mine(static_cast<size_t>(per), 0.0f);  // the block, padded to mp_ rows
  std::copy(src, src + mb_ * width, mine.begin());
  std::vector<float> all(static_cast<size_t>(per * R));
  cp_->all_gather(mine.data(), all.data(), per, ElemType::f32, label);
  // Rank r's rows are [r·mp_, …): the gathered rows [0, M_) are the step's rows in order.
  std::copy(all.begin(), all.begin() + M_ * width, sized(dst, M_ * width));
}

// Entry e's rows [r0, r0 + n) of qkv: rotate, cache, attend to the positions
// cached here (all of them without cp). Its lse rows are [H, n] at H·r0.
void Decoder::attend(int64_t l, const DecodeRows& e, int64_t r0) {
  const int64_t H = td_.heads, KV = td_.kv_heads, D = cfg_.head_dim(), Q = H * D, KVD = KV * D,
                QKV = Q + 2 * KVD;
  const int64_t len = cache_.length(e.seq), L = len + e.n, here = cache_.local_count(L);
  float* q = qkv_.data() + r0 * QKV;
  const int32_t* pos = pos_.data() + r0;
  const RopeTable& rope = rope_for(L);
  rope_forward(q, pos, rope, e.n, H, QKV);
  if (!rotate_at_attention_) rope_forward(q + Q, pos, rope, e.n, KV, QKV);
  cache_.write(l, e.seq, len, e.n, q + Q, q + Q + KVD, QKV);
  float* out = att_.data() + r0 * Q;
  float* lse = lse_.data() + H * r0;
  if (here == 0) {  // no position of this sequence is cached on this cp rank yet
    std::fill(out, out + e.n * Q, 0.0f);
    std::fill(lse, lse + H * e.n, -std::numeric_limits<float>::infinity());
    return;
  }
  const float* k = cache_.keys(l, e.seq, L, kbuf_);
  const float* v = cache_.values(l, e.seq, L, vbuf_);
  if (rotate_at_attention_) {  // every cached key, with this length's frequencies
    float* kr = sized(krot_, here * KVD);
    std::memcpy(kr, k, static_cast<size_t>(here * KVD) * sizeof(float));
    rope_forward(kr, kpos_.data(), rope, here, KV, KVD);
    k = kr;
  }
  const AttentionDims d{1, e.n, here, H, KV, D, QKV, KVD, Q};
  attention_forward(out, lse, q, k, v, pos, kpos_.data(), d);
}

// Context parallelism: each cp rank attended to its positions; all-gather the
// partial outputs and log-sum-exps and merge them in cp rank order, so every
// cp rank holds the same result (that of attention over all positions).
void Decoder::merge_over_cp(std::span<const DecodeRows> entries) {
  const int64_t H = td_.heads, D = cfg_.head_dim(), Q = H * D, M = M_;
  const int64_t per = M * Q + H * M, R = cp_->size();
  std::vector<float> mine(static_cast<size_t>(per));
  std::memcpy(mine.data(), att_.data(), static_cast<size_t>(M * Q) * sizeof(float));
  std::memcpy(mine.data() + M * Q, lse_.data(), static_cast<size_t>(H * M) * sizeof(float));
  float* all = sized(gathered_, per * R);
  cp_->all_gather(mine.data(), all, per, ElemType::f32, "generate cp attention");
  std::memcpy(att_.data(), all, static_cast<size_t>(M * Q) * sizeof(float));
  std::memcpy(lse_.data(), all + M * Q, static_cast<size_t>(H * M) * sizeof(float));
  for (int64_t r = 1; r < R; ++r) {
    const float* part = all + r * per;
    int64_t r0 = 0;
    for (const DecodeRows& e : entries) {
      const AttentionDims d{1, e.n, 0, H, td_.kv_heads, D, 0, 0, Q};
      attention_merge(att_.data() + r0 * Q, lse_.data() + H * r0, part + r0 * Q, part + M * Q + H * r0, d);
      r0 += e.n;
    }
  }
}

}  // namespace mt

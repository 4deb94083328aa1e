#include "infer/kv_attention.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "ops/attention.h"
#include "ops/primitives.h"
#include "ops/rope.h"

namespace mt {

KvAttention::KvAttention(const ModelConfig& cfg, const TpDims& td, KvCache& cache, Group* cp,
                         cp::CpImpl cp_impl)
    : cache_(cache),
      cp_(cp != nullptr && cp->size() > 1 ? cp : nullptr),
      cp_impl_(cp_impl),
      cfg_(cfg),
      td_(td),
      scaling_(cfg_.rope()),
      rotate_at_attention_(scaling_.type == RopeType::dynamic),
      rope_(cfg_.rope_table(scaling_, cfg_.max_seq_len)),
      rope_len_(rope_) {
  kpos_.resize(static_cast<size_t>(cache.slots()));
  for (size_t j = 0; j < kpos_.size(); ++j)
    kpos_[j] = static_cast<int32_t>(cache.position_of(static_cast<int64_t>(j)));
  kpos_dev_.mirror(kpos_, "positions", MemKind::activation);
}

const RopeTable& KvAttention::rope_for(int64_t seq_len) {
  if (!rotate_at_attention_) return rope_;
  if (rope_len_.seq_len() != seq_len) rope_len_ = cfg_.rope_table(scaling_, seq_len);
  return rope_len_;
}

void KvAttention::begin_step(std::span<const DecodeRows> entries) {
  entries_ = entries;
  M_ = 0;
  e0_.clear();
  bool chunk = false;
  for (const DecodeRows& e : entries) {
    e0_.push_back(M_);
    chunk = chunk || e.n > 1;
    for (int64_t i = 0; i < e.n; ++i) {
      sized(pos_, M_ + 1)[M_] = static_cast<int32_t>(cache_.length(e.seq) + i);
      ++M_;
    }
  }
  pos_.resize(static_cast<size_t>(M_));
  pos_dev_.mirror(pos_, "positions", MemKind::activation);
  ring_ = cp_ != nullptr && cp_impl_ == cp::CpImpl::ring && chunk;
  const int R = cp_ != nullptr ? cp_->size() : 1, me = cp_ != nullptr ? cp_->rank() : 0;
  mp_ = (M_ + R - 1) / R;
  m0_ = std::min<int64_t>(M_, me * mp_);
  mb_ = std::min<int64_t>(M_, m0_ + mp_) - m0_;
}

void KvAttention::gather_blocks(const float* src, int64_t width, std::vector<float>& dst, const char* label) {
  const int64_t R = cp_->size(), per = mp_ * width;
  std::vector<float> mine(static_cast<size_t>(per), 0.0f);  // the block, padded to mp_ rows
  std::copy(src, src + mb_ * width, mine.begin());
  std::vector<float> all(static_cast<size_t>(per * R));
  cp_->all_gather(mine.data(), all.data(), per, ElemType::f32, label);
  // Rank r's rows are [r·mp_, …): the gathered rows [0, M_) are the step's rows in order.
  std::copy(all.begin(), all.begin() + M_ * width, sized(dst, M_ * width));
}

// Each entry's rows of the block, at their positions, by the table of the
// entry's length after the step; k too unless keys are cached unrotated.
void KvAttention::rotate(float* qkv, const int32_t* /*pos*/, const RopeTable& /*rope*/, int64_t N, int64_t H,
                         int64_t KV, int64_t QKV) {
  MT_CHECK(N == mb_, "the KV cache's attention rotates the step's block of ", mb_, " rows, not ", N);
  const int64_t Q = H * cfg_.head_dim();
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Rows qr = entry_rows(i, {m0_, m0_ + mb_});
    if (qr.n() == 0) continue;
    const RopeTable& rope = rope_for(cache_.length(entries_[i].seq) + entries_[i].n);
    float* q = qkv + (qr.a - m0_) * QKV;
    rope_forward(q, pos_dev_.data() + qr.a, rope, qr.n(), H, QKV);
    if (!rotate_at_attention_) rope_forward(q + Q, pos_dev_.data() + qr.a, rope, qr.n(), KV, QKV);
  }
}

void KvAttention::forward(int64_t layer, float* out, float* /*lse*/, const float* q, const float*,
                          const float*, const int32_t*, const int32_t*, const AttentionDims&,
                          std::string_view) {
  const int64_t Q = td_.heads * cfg_.head_dim(), QKV = Q + 2 * td_.kv_heads * cfg_.head_dim();
  sized(att_, M_ * Q);
  sized(lse_, td_.heads * M_);
  if (ring_) {
    ring_attention(layer, q);
  } else {
    const float* all = q;  // every row's q|k|v
    if (cp_ != nullptr) {
      gather_blocks(q, QKV, qkv_, "generate cp qkv");
      all = qkv_.data();
    }
    int64_t r0 = 0;
    for (const DecodeRows& e : entries_) {
      attend(layer, e, r0, all);
      r0 += e.n;
    }
    if (cp_ != nullptr) merge_over_cp();
  }
  copy_bytes(out, att_.data() + m0_ * Q, mb_ * Q * int64_t{sizeof(float)});
}

void KvAttention::backward(float*, float*, float*, const float*, const float*, const float*, const float*,
                           const float*, const float*, const int32_t*, const int32_t*, const AttentionDims&,
                           std::string_view) {
  MT_CHECK(false, "the KV cache's attention runs forward only (generation has no backward)");
}

// Entry e's rows [r0, r0 + n) of qkv (all the step's rows, rotated): cache,
// attend to the positions cached here (all of them without cp). Its lse rows
// are [H, n] at H·r0.
void KvAttention::attend(int64_t l, const DecodeRows& e, int64_t r0, const float* qkv) {
  const int64_t H = td_.heads, KV = td_.kv_heads, D = cfg_.head_dim(), Q = H * D, KVD = KV * D,
                QKV = Q + 2 * KVD;
  const int64_t len = cache_.length(e.seq), L = len + e.n, here = cache_.local_count(L);
  const float* q = qkv + r0 * QKV;
  const int32_t* pos = pos_dev_.data() + r0;
  cache_.write(l, e.seq, len, e.n, q + Q, q + Q + KVD, QKV);
  float* out = att_.data() + r0 * Q;
  float* lse = lse_.data() + H * r0;
  if (here == 0) {  // no position of this sequence is cached on this cp rank yet
    zero_bytes(out, e.n * Q * int64_t{sizeof(float)});
    fill(lse, -std::numeric_limits<float>::infinity(), H * e.n);
    return;
  }
  const float* k = cache_.keys(l, e.seq, L, kbuf_);
  const float* v = cache_.values(l, e.seq, L, vbuf_);
  if (rotate_at_attention_) {  // every cached key, with this length's frequencies
    float* kr = sized(krot_, here * KVD);
    copy_bytes(kr, k, here * KVD * int64_t{sizeof(float)});
    rope_forward(kr, kpos_dev_.data(), rope_for(L), here, KV, KVD);
    k = kr;
  }
  const AttentionDims d{1, e.n, here, H, KV, D, QKV, KVD, Q};
  attention_forward(out, lse, q, k, v, pos, kpos_dev_.data(), d);
}

// Context parallelism: each cp rank attended to its positions; all-gather the
// partial outputs and log-sum-exps and merge them in cp rank order, so every
// cp rank holds the same result (that of attention over all positions).
void KvAttention::merge_over_cp() {
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
    for (const DecodeRows& e : entries_) {
      const AttentionDims d{1, e.n, 0, H, td_.kv_heads, D, 0, 0, Q};
      attention_merge(att_.data() + r0 * Q, lse_.data() + H * r0, part + r0 * Q, part + M * Q + H * r0, d);
      r0 += e.n;
    }
  }
}

}  // namespace mt

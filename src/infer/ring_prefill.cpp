// The prefill's attention under context parallelism by a ring (kv_attention.h;
// docs/MODEL.md, "Generation"). Every cp rank runs the same entries, so each
// knows every rank's block of rows and every shard's cached positions, and
// with them the size and the layout of every packet it will receive.
#include <algorithm>
#include <cstring>
#include <limits>

#include "infer/kv_attention.h"
#include "ops/attention.h"
#include "ops/rope.h"

namespace mt {
namespace {
constexpr int kRingTag = 31;  // the generation's cp group carries no other point-to-point message
}  // namespace

KvAttention::Rows KvAttention::block_rows(int s) const {
  const int64_t a = std::min<int64_t>(M_, s * mp_);
  return {a, std::min<int64_t>(M_, a + mp_)};
}

// Entry i's rows that lie within `within`.
KvAttention::Rows KvAttention::entry_rows(size_t i, Rows within) const {
  const int64_t a = e0_[i], b = i + 1 < e0_.size() ? e0_[i + 1] : M_;
  return {std::max(a, within.a), std::min(b, within.b)};
}

// Rank s's packet, per entry in order: the k|v of the positions shard s caches
// (before this step), then those of its rows in block s; 2·KVD floats a row.
int64_t KvAttention::packet_floats(int s) const {
  int64_t rows = 0;
  for (size_t i = 0; i < entries_.size(); ++i)
    rows += cache_.count_in_shard(cache_.length(entries_[i].seq), s) + entry_rows(i, block_rows(s)).n();
  return rows * 2 * td_.kv_heads * cfg_.head_dim();
}

void KvAttention::pack_packet(int64_t l, const float* qkv, float* out) {
  const int64_t KVD = td_.kv_heads * cfg_.head_dim(), Q = td_.heads * cfg_.head_dim(), QKV = Q + 2 * KVD;
  const auto bytes = static_cast<size_t>(KVD) * sizeof(float);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const int64_t len = cache_.length(entries_[i].seq), old = cache_.local_count(len);
    if (old > 0) {
      const float* k = cache_.keys(l, entries_[i].seq, len, kbuf_);
      const float* v = cache_.values(l, entries_[i].seq, len, vbuf_);
      for (int64_t t = 0; t < old; ++t, out += 2 * KVD) {
        std::memcpy(out, k + t * KVD, bytes);
        std::memcpy(out + KVD, v + t * KVD, bytes);
      }
    }
    const Rows r = entry_rows(i, {m0_, m0_ + mb_});
    for (int64_t row = r.a; row < r.b; ++row, out += 2 * KVD)  // k|v are adjacent in a q|k|v row
      std::memcpy(out, qkv + (row - m0_) * QKV + Q, 2 * bytes);
  }
}

// Rank s's packet: its new rows into this rank's cache shard, and this rank's
// queries of each entry attended to the keys of the packet they can see.
void KvAttention::attend_packet(int64_t l, const float* qkv, const float* packet, int s) {
  const int64_t H = td_.heads, KV = td_.kv_heads, D = cfg_.head_dim(), Q = H * D, KVD = KV * D, W = 2 * KVD,
                QKV = Q + 2 * KVD, R = cp_->size();
  const Rows mine{m0_, m0_ + mb_}, block = block_rows(s);
  for (size_t i = 0; i < entries_.size(); ++i) {
    const DecodeRows& e = entries_[i];
    const int64_t len = cache_.length(e.seq), old = cache_.count_in_shard(len, s);
    const Rows nr = entry_rows(i, block), qr = entry_rows(i, mine);
    const float* run = packet;
    packet += (old + nr.n()) * W;
    if (nr.n() > 0)
      cache_.write(l, e.seq, pos_[static_cast<size_t>(nr.a)], nr.n(), run + old * W, run + old * W + KVD, W);
    if (qr.n() == 0) continue;
    // Every cached key is visible; a new one up to the last query's position.
    const int64_t last = pos_[static_cast<size_t>(qr.b - 1)];
    const int64_t fresh =
        nr.n() == 0 ? 0 : std::clamp<int64_t>(last - pos_[static_cast<size_t>(nr.a)] + 1, 0, nr.n());
    const int64_t nk = old + fresh;
    if (nk == 0) continue;
    int32_t* kp = sized(ring_pos_, nk);
    for (int64_t j = 0; j < old; ++j)
      kp[j] = static_cast<int32_t>(j * R + s);
    std::copy(pos_.begin() + nr.a, pos_.begin() + nr.a + fresh, kp + old);
    const float* keys = run;
    if (cache_.dtype() != KvDtype::f32 || rotate_at_attention_) {  // the new keys as the cache returns them
      float* kb = sized(ring_keys_, nk * W);
      std::memcpy(kb, run, static_cast<size_t>(nk * W) * sizeof(float));
      cache_.round_trip(kb + old * W, fresh, W);
      cache_.round_trip(kb + old * W + KVD, fresh, W);
      if (rotate_at_attention_) rope_forward(kb, kp, rope_for(len + e.n), nk, KV, W);
      keys = kb;
    }
    const AttentionDims d{1, qr.n(), nk, H, KV, D, QKV, W, Q};
    attention_forward(sized(part_out_, qr.n() * Q), sized(part_lse_, H * qr.n()), qkv + (qr.a - m0_) * QKV,
                      keys, keys + KVD, pos_.data() + qr.a, kp, d);
    attention_merge(att_.data() + qr.a * Q, lse_.data() + H * qr.a, part_out_.data(), part_lse_.data(), d);
  }
}

// Step j: this rank holds rank (me − j)'s packet; the next one's receive from
// me − 1 and this one's send to me + 1 are posted before attending to it, so
// the transfer runs under the compute (as the training ring does,
// parallel/context_parallel.h). att_ rows [m0_, m0_ + mb_) and their lse come out.
void KvAttention::ring_attention(int64_t l, const float* qkv) {
  const int64_t H = td_.heads, Q = H * cfg_.head_dim();
  const int R = cp_->size(), me = cp_->rank();
  std::vector<int64_t> floats(static_cast<size_t>(R));
  for (int s = 0; s < R; ++s)
    floats[static_cast<size_t>(s)] = packet_floats(s);
  const int64_t most = std::max<int64_t>(1, *std::max_element(floats.begin(), floats.end()));
  pack_packet(l, qkv, sized(packet_[0], most));
  sized(packet_[1], most);
  std::fill(att_.data() + m0_ * Q, att_.data() + (m0_ + mb_) * Q, 0.0f);
  std::fill(lse_.data() + H * m0_, lse_.data() + H * (m0_ + mb_), -std::numeric_limits<float>::infinity());
  int cur = 0;
  for (int j = 0; j < R; ++j) {
    const int s = (me - j + R) % R, from = (s + R - 1) % R;
    Work send, recv;
    if (j + 1 < R) {
      recv = cp_->recv_async(packet_[1 - cur].data(), floats[static_cast<size_t>(from)], ElemType::f32,
                             (me + R - 1) % R, kRingTag, "generate cp prefill ring k,v");
      send = cp_->send_async(packet_[cur].data(), floats[static_cast<size_t>(s)], ElemType::f32, (me + 1) % R,
                             kRingTag, "generate cp prefill ring k,v");
    }
    attend_packet(l, qkv, packet_[cur].data(), s);
    if (j + 1 < R) {
      send.wait();
      recv.wait();
      cur = 1 - cur;
    }
  }
}

}  // namespace mt

// Ulysses and hybrid context parallelism (contracts and ledger in the header).
// Every copy goes through the kernel table's primitives (ops/primitives.h), so
// the buffers may live on the run's device.
#include "parallel/cp_ulysses.h"

#include <string>

#include "core/device_mirror.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/primitives.h"
#include "parallel/context_parallel.h"
#include "parallel/cp_canonical.h"
#include "parallel/tp_comm.h"

namespace mt::cp {
namespace {

// One rank's view of the exchange: the dims before and the head share after.
struct Heads {
  int U = 1, j = 0;  // the all-to-all group's size and this rank's index in it
  int64_t B = 0, Tl = 0, H = 0, KV = 0, D = 0;
  int64_t Hu = 0, KVu = 0;  // heads a rank holds after the exchange

  Heads(const AttentionDims& d, int U_, int j_)
      : U(U_), j(j_), B(d.batch), Tl(d.q_len), H(d.n_heads), KV(d.n_kv_heads), D(d.head_dim) {
    Hu = H / U;
    KVu = KV >= U ? KV / U : 1;
  }
  // The first kv head rank i holds: its query heads' (query head h reads kv head h / (H / KV)).
  int64_t kv0(int i) const { return KV >= U ? i * KVu : (i * Hu) / (H / KV); }
  int64_t n() const { return B * Tl; }                // rows a rank sends to each rank
  int64_t L() const { return U * Tl; }                // tokens per sequence after the exchange
  int64_t row() const { return (Hu + 2 * KVu) * D; }  // a gathered row: q | k | v
  int64_t hd() const { return Hu * D; }
  // Floats of one rank's block in each message (header: the ledger's widths).
  int64_t fwd_in() const { return n() * (row() + 1); }
  int64_t fwd_out() const { return n() * (hd() + Hu); }
  int64_t bwd_in() const { return n() * (row() + 2 * hd() + Hu + 1); }
  int64_t bwd_out() const { return n() * row(); }
  // The attention over the gathered tokens: U·Tl tokens, Hu heads, one fused row.
  AttentionDims dims(const AttentionDims& d, int64_t out_stride, AttentionDropout* dr) const {
    AttentionDims u{B, L(), L(), Hu, KVu, D, row(), row(), out_stride};
    if (d.dropout != nullptr) {  // the mask is drawn by global head
      *dr = *d.dropout;
      dr->head0 += j * Hu;
      u.dropout = dr;
    }
    return u;
  }
};

void copy_f(float* dst, const float* src, int64_t n) {
  copy_bytes(dst, src, n * int64_t{sizeof(float)});
}
void copy_i(int32_t* dst, const int32_t* src, int64_t n) {
  copy_bytes(dst, src, n * int64_t{sizeof(int32_t)});
}

std::string label(std::string_view site, const char* what, const char* dir, const Heads& h, int64_t width) {
  return tp::comm_label(site, what, dir, {h.U, h.B, h.Tl, width});
}

// This rank's rows of q, k, v for rank i's heads: [n, row] at dst.
void pack_qkv(float* dst, const float* q, const float* k, const float* v, const AttentionDims& d,
              const Heads& h, int i) {
  const int64_t row = h.row(), kv = h.KVu * h.D, k0 = h.kv0(i) * h.D;
  copy_rows(dst, row, q + i * h.hd(), d.q_stride, h.n(), h.hd());
  copy_rows(dst + h.hd(), row, k + k0, d.kv_stride, h.n(), kv);
  copy_rows(dst + h.hd() + kv, row, v + k0, d.kv_stride, h.n(), kv);
}

// Rank i's n rows of `width` floats (batch-major [B, Tl]) into the gathered
// [B, L, width] at its token offset.
void unpack_rows(float* dst, const float* src, const Heads& h, int i, int64_t width) {
  for (int64_t b = 0; b < h.B; ++b)
    copy_f(dst + (b * h.L() + i * h.Tl) * width, src + b * h.Tl * width, h.Tl * width);
}
void unpack_pos(int32_t* dst, const float* src, const Heads& h, int i) {
  const auto* p = reinterpret_cast<const int32_t*>(src);
  for (int64_t b = 0; b < h.B; ++b)
    copy_i(dst + b * h.L() + i * h.Tl, p + b * h.Tl, h.Tl);
}
// The reverse of unpack_rows: the gathered rows of rank i's tokens.
void repack_rows(float* dst, const float* src, const Heads& h, int i, int64_t width) {
  for (int64_t b = 0; b < h.B; ++b)
    copy_f(dst + b * h.Tl * width, src + (b * h.L() + i * h.Tl) * width, h.Tl * width);
}
// lse [B, Hu, L] → rank i's [B, Hu, Tl], and back.
void lse_to_owner(float* dst, const float* lse_u, const Heads& h, int i) {
  for (int64_t b = 0; b < h.B; ++b)
    copy_rows(dst + b * h.Hu * h.Tl, h.Tl, lse_u + b * h.Hu * h.L() + i * h.Tl, h.L(), h.Hu, h.Tl);
}
void lse_from_owner(float* lse_u, const float* src, const Heads& h, int i) {
  for (int64_t b = 0; b < h.B; ++b)
    copy_rows(lse_u + b * h.Hu * h.L() + i * h.Tl, h.L(), src + b * h.Hu * h.Tl, h.Tl, h.Hu, h.Tl);
}
// The caller's lse [B, H, Tl]: rank i's heads as [B, Hu, Tl], and back.
void lse_of_heads(float* dst, const float* lse, const Heads& h, int i) {
  for (int64_t b = 0; b < h.B; ++b)
    copy_f(dst + b * h.Hu * h.Tl, lse + (b * h.H + i * h.Hu) * h.Tl, h.Hu * h.Tl);
}
void lse_into_heads(float* lse, const float* src, const Heads& h, int i) {
  for (int64_t b = 0; b < h.B; ++b)
    copy_f(lse + (b * h.H + i * h.Hu) * h.Tl, src + b * h.Hu * h.Tl, h.Hu * h.Tl);
}

Group* live_ring(Group* ring) {
  return ring != nullptr && ring->size() > 1 ? ring : nullptr;
}

// The attention of the gathered tokens: canonical, ring across groups, or local.
void inner_forward(float* out, float* lse, const float* qkv, const int32_t* pos, const AttentionDims& u,
                   const Heads& h, Group* ring, int C, std::string_view site) {
  const float *q = qkv, *k = qkv + h.hd(), *v = k + h.KVu * h.D;
  if (C > 0) return canonical_attention_forward(out, lse, q, k, v, pos, pos, u, ring, CpImpl::ring, C, site);
  if (ring != nullptr) {
    ring_attention_forward(out, lse, q, k, v, pos, pos, u, *ring, site);
    return;
  }
  attention_forward(out, lse, q, k, v, pos, pos, u);
}
void inner_backward(float* dqkv, const float* od, const float* lse, const float* qkv, const int32_t* pos,
                    const AttentionDims& u, const Heads& h, Group* ring, int C, std::string_view site) {
  const int64_t kv = h.KVu * h.D;
  const float *q = qkv, *k = qkv + h.hd(), *v = k + kv, *out = od, *dout = od + h.hd();
  float *dq = dqkv, *dk = dqkv + h.hd(), *dv = dk + kv;
  if (C > 0)
    return canonical_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, pos, pos, u, ring, CpImpl::ring,
                                        C, site);
  if (ring != nullptr) {
    ring_attention_backward(dq, dk, dv, dout, out, lse, q, k, v, pos, pos, u, *ring, site);
    return;
  }
  attention_backward(dq, dk, dv, dout, out, lse, q, k, v, pos, pos, u);
}

void check_call(const AttentionDims& d, const Group& a2a, const int32_t* q_pos, const int32_t* k_pos) {
  check_ulysses_heads(d.n_heads, d.n_kv_heads, a2a.size(), "ulysses attention");
  MT_REQUIRE(d.q_len == d.kv_len && q_pos == k_pos, ConfigError, "ulysses attention: q_len (", d.q_len,
             ") and kv_len (", d.kv_len, ") must be the same tokens (self-attention, q_pos = k_pos)");
}

bool query_heads_split(int64_t H, int U) {
  return U >= 1 && H % U == 0;
}
bool kv_heads_split(int64_t KV, int U) {
  return U >= 1 && KV >= 1 && (KV % U == 0 || U % KV == 0);
}

}  // namespace

bool ulysses_heads_split(int64_t H, int64_t KV, int U) {
  return query_heads_split(H, U) && kv_heads_split(KV, U);
}

void check_ulysses_heads(int64_t H, int64_t KV, int U, const char* who) {
  MT_REQUIRE(query_heads_split(H, U), ConfigError, who, ": the all-to-all over ", U,
             " ranks needs the query heads per rank (n_heads / tp = ", H, ") divisible by ", U);
  MT_REQUIRE(kv_heads_split(KV, U), ConfigError, who, ": the all-to-all over ", U,
             " ranks needs the kv heads per rank (", KV, ") divisible by ", U,
             " or dividing it (one kv head replicated over the ranks sharing it)");
}

CallPlan ulysses_call_plan(const AttentionDims& d, int U, int R, int C, Pass pass) {
  const Heads h(d, U, 0);
  AttentionDropout dr;
  const bool fwd = pass == Pass::forward;
  const AttentionDims u = h.dims(d, fwd ? h.hd() : 2 * h.hd(), &dr);
  const int64_t rows = h.B * h.L();
  CallPlan inner =
      C > 0 ? canonical_call_plan(u, CpImpl::ring, R, C, pass) : call_plan(u, CpImpl::ring, R, pass);
  const int first = fwd ? 5 : 6, send = first + static_cast<int>(inner.buffers.size());
  std::vector<Buffer> b;
  if (fwd) {
    b = {{"a2a_send", U * h.fwd_in(), MemKind::comm, 2},
         {"a2a_recv", U * h.fwd_in(), MemKind::comm, 3},
         {"qkv_heads", rows * h.row(), MemKind::scratch, send},
         {"out_heads", rows * h.hd(), MemKind::scratch, send + 1},
         {"lse_heads", rows * h.Hu, MemKind::scratch, send + 1}};
  } else {
    b = {{"a2a_send", U * h.bwd_in(), MemKind::comm, 2},
         {"a2a_recv", U * h.bwd_in(), MemKind::comm, 5},
         {"qkv_heads", rows * h.row(), MemKind::scratch, send},
         {"od_heads", rows * 2 * h.hd(), MemKind::scratch, send},
         {"lse_heads", rows * h.Hu, MemKind::scratch, send},
         {"dqkv_heads", rows * h.row(), MemKind::scratch, send + 1}};
  }
  for (Buffer x : inner.buffers) {  // held until the call returns: until the return message
    x.freed_before = x.freed_before == kHeld ? send : x.freed_before + first;
    b.push_back(x);
  }
  const int64_t back = fwd ? h.fwd_out() : h.bwd_out();
  b.push_back({"back_send", U * back, MemKind::comm});
  b.push_back({"back_recv", U * back, MemKind::comm});
  CallPlan plan;
  plan.buffers = std::move(b);
  return plan;
}

// The q|k|v|pos exchange, the attention of the head share, the out|lse exchange.
void ulysses_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                               const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d, Group& a2a,
                               Group* ring, int C, std::string_view site) {
  check_call(d, a2a, q_pos, k_pos);
  ring = live_ring(ring);
  const Heads h(d, a2a.size(), a2a.rank());
  const CallPlan plan = ulysses_call_plan(d, h.U, ring != nullptr ? ring->size() : 1, C, Pass::forward);
  Tensor send = plan.make("a2a_send"), recv = plan.make("a2a_recv");
  for (int i = 0; i < h.U; ++i) {
    float* blk = send.data() + i * h.fwd_in();
    pack_qkv(blk, q, k, v, d, h, i);
    copy_i(reinterpret_cast<int32_t*>(blk + h.n() * h.row()), k_pos, h.n());
  }
  a2a.all_to_all(send.data(), recv.data(), h.fwd_in(), ElemType::f32,
                 label(site, "ulysses q,k,v,pos", "forward", h, h.row() + 1));
  send = Tensor();
  Tensor qkv = plan.make("qkv_heads");
  DeviceScratch<int32_t> pos(h.B * h.L());
  for (int i = 0; i < h.U; ++i) {
    const float* blk = recv.data() + i * h.fwd_in();
    unpack_rows(qkv.data(), blk, h, i, h.row());
    unpack_pos(pos.data(), blk + h.n() * h.row(), h, i);
  }
  recv = Tensor();
  Tensor o = plan.make("out_heads"), l = plan.make("lse_heads");
  AttentionDropout dr;
  inner_forward(o.data(), l.data(), qkv.data(), pos.data(), h.dims(d, h.hd(), &dr), h, ring, C, site);
  qkv = Tensor();
  Tensor back = plan.make("back_send");
  for (int i = 0; i < h.U; ++i) {
    float* blk = back.data() + i * h.fwd_out();
    repack_rows(blk, o.data(), h, i, h.hd());
    lse_to_owner(blk + h.n() * h.hd(), l.data(), h, i);
  }
  o = Tensor();
  l = Tensor();
  Tensor mine = plan.make("back_recv");
  a2a.all_to_all(back.data(), mine.data(), h.fwd_out(), ElemType::f32,
                 label(site, "ulysses out,lse", "forward", h, h.hd() + h.Hu));
  for (int i = 0; i < h.U; ++i) {  // rank i computed heads [i·Hu, (i+1)·Hu) of this rank's tokens
    const float* blk = mine.data() + i * h.fwd_out();
    copy_rows(out + i * h.hd(), d.out_stride, blk, h.hd(), h.n(), h.hd());
    lse_into_heads(lse, blk + h.n() * h.hd(), h, i);
  }
}

// The q|k|v|out|dout|lse|pos exchange, the head share's backward, the dq|dk|dv exchange.
void ulysses_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                const float* lse, const float* q, const float* k, const float* v,
                                const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                                Group& a2a, Group* ring, int C, std::string_view site) {
  check_call(d, a2a, q_pos, k_pos);
  ring = live_ring(ring);
  const Heads h(d, a2a.size(), a2a.rank());
  const CallPlan plan = ulysses_call_plan(d, h.U, ring != nullptr ? ring->size() : 1, C, Pass::backward);
  const int64_t n = h.n(), hd = h.hd(), od_at = n * h.row(), lse_at = od_at + n * 2 * hd,
                pos_at = lse_at + n * h.Hu;
  Tensor send = plan.make("a2a_send"), recv = plan.make("a2a_recv");
  for (int i = 0; i < h.U; ++i) {
    float* blk = send.data() + i * h.bwd_in();
    pack_qkv(blk, q, k, v, d, h, i);
    copy_rows(blk + od_at, 2 * hd, out + i * hd, d.out_stride, n, hd);
    copy_rows(blk + od_at + hd, 2 * hd, dout + i * hd, d.out_stride, n, hd);
    lse_of_heads(blk + lse_at, lse, h, i);
    copy_i(reinterpret_cast<int32_t*>(blk + pos_at), k_pos, n);
  }
  a2a.all_to_all(send.data(), recv.data(), h.bwd_in(), ElemType::f32,
                 label(site, "ulysses q,k,v,out,dout,lse,pos", "backward", h, h.row() + 2 * hd + h.Hu + 1));
  send = Tensor();
  Tensor qkv = plan.make("qkv_heads"), od = plan.make("od_heads"), l = plan.make("lse_heads");
  DeviceScratch<int32_t> pos(h.B * h.L());
  for (int i = 0; i < h.U; ++i) {
    const float* blk = recv.data() + i * h.bwd_in();
    unpack_rows(qkv.data(), blk, h, i, h.row());
    unpack_rows(od.data(), blk + od_at, h, i, 2 * hd);
    lse_from_owner(l.data(), blk + lse_at, h, i);
    unpack_pos(pos.data(), blk + pos_at, h, i);
  }
  recv = Tensor();
  Tensor dqkv = plan.make("dqkv_heads");
  dqkv.zero();  // the inner backward accumulates
  AttentionDropout dr;
  inner_backward(dqkv.data(), od.data(), l.data(), qkv.data(), pos.data(), h.dims(d, 2 * hd, &dr), h, ring, C,
                 site);
  qkv = Tensor();
  od = Tensor();
  l = Tensor();
  Tensor back = plan.make("back_send");
  for (int i = 0; i < h.U; ++i)
    repack_rows(back.data() + i * h.bwd_out(), dqkv.data(), h, i, h.row());
  dqkv = Tensor();
  Tensor mine = plan.make("back_recv");
  a2a.all_to_all(back.data(), mine.data(), h.bwd_out(), ElemType::f32,
                 label(site, "ulysses dq,dk,dv", "backward", h, h.row()));
  const int64_t kv = h.KVu * h.D;
  for (int i = 0; i < h.U;
       ++i) {  // in rank order: a replicated kv head's terms add up the same way every run
    const float* blk = mine.data() + i * h.bwd_out();
    add_rows(dq + i * hd, d.q_stride, blk, h.row(), n, hd);
    add_rows(dk + h.kv0(i) * h.D, d.kv_stride, blk + hd, h.row(), n, kv);
    add_rows(dv + h.kv0(i) * h.D, d.kv_stride, blk + hd + kv, h.row(), n, kv);
  }
}

}  // namespace mt::cp

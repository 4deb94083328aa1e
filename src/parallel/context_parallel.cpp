// Context parallelism: zigzag layout, ring attention and its all-gather
// counterpart (contracts and ledger in the header).
#include "parallel/context_parallel.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/device_mirror.h"
#include "core/error.h"
#include "core/tensor.h"
#include "ops/primitives.h"
#include "parallel/cp_buffer_plan.h"
#include "parallel/tp_comm.h"

namespace mt::cp {
namespace {

// Point-to-point tags of the two ring messages (MPI keeps the order of
// messages with the same source, tag and communicator).
constexpr int kTagKv = 0x4350;   // 'CP': a k/v/pos block
constexpr int kTagDkv = 0x4351;  // a travelling dk/dv block

void check_rank(int cp, int rank) {
  MT_REQUIRE(cp >= 1 && rank >= 0 && rank < cp, ConfigError, "context parallelism: rank (", rank,
             ") must be in [0, cp) with cp (", cp, ") >= 1");
}

// Calls f(local_row, global_row) for this rank's T/cp rows of one sequence.
template <typename F>
void for_zigzag_rows(int64_t T, int cp, int rank, F f) {
  check_zigzag(T, cp);
  check_rank(cp, rank);
  const int64_t c = T / (2 * cp);
  for (int64_t i = 0; i < c; ++i) {
    f(i, rank * c + i);
    f(c + i, (2 * cp - 1 - rank) * c + i);
  }
}

// inverse = false: out[B, T/cp, width] ← this rank's rows of in[B, T, width];
// inverse = true: the other way round.
template <typename E>
void slice_rows(E* out, const E* in, int64_t B, int64_t T, int64_t width, int cp, int rank, bool inverse) {
  const int64_t Tl = T / cp;
  for (int64_t b = 0; b < B; ++b) {
    for_zigzag_rows(T, cp, rank, [&](int64_t local, int64_t global) {
      const int64_t lo = (b * Tl + local) * width, gl = (b * T + global) * width;
      if (inverse) {
        std::copy(in + lo, in + lo + width, out + gl);
      } else {
        std::copy(in + gl, in + gl + width, out + lo);
      }
    });
  }
}

// Everything attention_forward/_backward would reject, checked before the
// first message is posted (a throw with transfers in flight would hang the ring).
void check_dims(const AttentionDims& d, const char* who) {
  MT_REQUIRE(
      d.batch >= 1 && d.q_len >= 1 && d.kv_len >= 1 && d.n_heads >= 1 && d.n_kv_heads >= 1 && d.head_dim >= 1,
      ConfigError, who, ": batch (", d.batch, "), q_len (", d.q_len, "), kv_len (", d.kv_len, "), n_heads (",
      d.n_heads, "), n_kv_heads (", d.n_kv_heads, ") and head_dim (", d.head_dim, ") must be positive");
  MT_REQUIRE(d.n_heads % d.n_kv_heads == 0, ConfigError, who, ": n_heads (", d.n_heads,
             ") must be divisible by n_kv_heads (", d.n_kv_heads, ")");
  MT_REQUIRE(d.q_stride >= d.n_heads * d.head_dim && d.out_stride >= d.n_heads * d.head_dim, ConfigError, who,
             ": q_stride (", d.q_stride, ") and out_stride (", d.out_stride,
             ") must be at least n_heads × head_dim (", d.n_heads * d.head_dim, ")");
  MT_REQUIRE(d.kv_stride >= d.n_kv_heads * d.head_dim, ConfigError, who, ": kv_stride (", d.kv_stride,
             ") must be at least n_kv_heads × head_dim (", d.n_kv_heads * d.head_dim, ")");
}

void pack(float* dst, const float* k, const float* v, const int32_t* pos, const Packing& p, int64_t stride) {
  copy_rows(dst, p.row, k, stride, p.B * p.Tk, p.row);
  copy_rows(dst + p.kv(), p.row, v, stride, p.B * p.Tk, p.row);
  copy_bytes(dst + 2 * p.kv(), pos, p.B * p.Tk * int64_t{sizeof(int32_t)});
}

const int32_t* packed_pos(const float* block, const Packing& p) {
  return reinterpret_cast<const int32_t*>(block + 2 * p.kv());
}

// dk[t, :row] += src[t], dv[t, :row] += src[kv + t] for the B·Tk rows.
void add_dkv(float* dk, float* dv, const float* src, const Packing& p, int64_t stride) {
  add_rows(dk, stride, src, p.row, p.B * p.Tk, p.row);
  add_rows(dv, stride, src + p.kv(), p.row, p.B * p.Tk, p.row);
}

// The positions a block decision reads, on the host: the one crossing of
// context parallelism ("cp positions", docs/ARCHITECTURE.md "The kernel seam").
HostView<int32_t> host_positions(const int32_t* pos, int64_t batch, int64_t len) {
  return HostView<int32_t>(pos, batch * len, "cp positions");
}

// True when no query of any sequence sees any key of the block (host positions).
bool masked(const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  for (int64_t b = 0; b < d.batch; ++b) {
    const int32_t q_hi = *std::max_element(q_pos + b * d.q_len, q_pos + (b + 1) * d.q_len);
    const int32_t k_lo = *std::min_element(k_pos + b * d.kv_len, k_pos + (b + 1) * d.kv_len);
    if (k_lo <= q_hi) return false;
  }
  return true;
}

// out = 0 (the head columns) and lse = −inf: the result of a query that sees no key.
void clear_output(float* out, float* lse, const AttentionDims& d) {
  const int64_t width = d.n_heads * d.head_dim * int64_t{sizeof(float)};
  for (int64_t t = 0; t < d.batch * d.q_len; ++t)
    zero_bytes(out + t * d.out_stride, width);
  fill(lse, -std::numeric_limits<float>::infinity(), d.batch * d.n_heads * d.q_len);
}

std::string kv_label(std::string_view site, const char* who, const char* dir, const Packing& p) {
  return tp::comm_label(site, who, dir, {p.B, p.Tk, 2 * p.row + 1});
}

}  // namespace

CpImpl parse_cp_impl(std::string_view name) {
  if (name == "ring") return CpImpl::ring;
  if (name == "allgather") return CpImpl::allgather;
  if (name == "ulysses") return CpImpl::ulysses;
  if (name == "hybrid") return CpImpl::hybrid;
  MT_THROW(ConfigError, "parallel.cp_impl ('", name, "') must be ring, allgather, ulysses or hybrid");
}

const char* cp_impl_name(CpImpl impl) {
  static const char* names[] = {"ring", "allgather", "ulysses", "hybrid"};
  return names[static_cast<int>(impl)];
}

void check_zigzag(int64_t T, int cp, const char* seq_name, const char* cp_name) {
  MT_REQUIRE(cp >= 1, ConfigError, cp_name, " (", cp, ") must be at least 1");
  MT_REQUIRE(T >= 2 * cp && T % (2 * cp) == 0, ConfigError, seq_name, " (", T, ") must be divisible by 2 x ",
             cp_name, " (", cp, ") = ", 2 * cp,
             ": context parallelism cuts each sequence into 2 x cp zigzag chunks");
}

void zigzag_positions(int32_t* pos, int64_t T, int cp, int rank) {
  for_zigzag_rows(T, cp, rank,
                  [&](int64_t local, int64_t global) { pos[local] = static_cast<int32_t>(global); });
}

void zigzag_slice(float* out, const float* in, int64_t B, int64_t T, int64_t width, int cp, int rank) {
  slice_rows(out, in, B, T, width, cp, rank, false);
}
void zigzag_slice(int32_t* out, const int32_t* in, int64_t B, int64_t T, int64_t width, int cp, int rank) {
  slice_rows(out, in, B, T, width, cp, rank, false);
}
void zigzag_unslice(float* out, const float* in, int64_t B, int64_t T, int64_t width, int cp, int rank) {
  slice_rows(out, in, B, T, width, cp, rank, true);
}
void zigzag_unslice(int32_t* out, const int32_t* in, int64_t B, int64_t T, int64_t width, int cp, int rank) {
  slice_rows(out, in, B, T, width, cp, rank, true);
}

// Step j: this rank holds the block of rank (r − j) mod P. Before computing on
// it, the transfer to r+1 of that block and the receive of the next one from
// r−1 are posted, so the wire runs under the compute (as far as the transport
// makes progress on its own).
CpStats ring_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                               const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d, Group& cp,
                               std::string_view site) {
  check_dims(d, "ring_attention_forward");
  const int P = cp.size(), r = cp.rank();
  const Packing p = packing(d);
  const AttentionDims dp = Packing::dims(d);
  const std::string label = kv_label(site, "ring_attention k,v,pos", "forward", p);
  Tensor block[2], part_out, part_lse;
  if (P > 1) {
    const CallPlan plan = call_plan(d, CpImpl::ring, P, Pass::forward);
    block[0] = plan.make("kv_block.0");
    block[1] = plan.make("kv_block.1");
    pack(block[0].data(), k, v, k_pos, p, d.kv_stride);
    part_out = plan.make("part_out");
    part_lse = plan.make("part_lse");
  }
  CpStats st;
  const HostView<int32_t> q_host = host_positions(q_pos, d.batch, d.q_len);
  int cur = 0;
  for (int j = 0; j < P; ++j) {
    Work send, recv;
    if (j + 1 < P) {
      recv = cp.recv_async(block[1 - cur].data(), p.numel(), ElemType::f32, (r + P - 1) % P, kTagKv, label);
      send = cp.send_async(block[cur].data(), p.numel(), ElemType::f32, (r + 1) % P, kTagKv, label);
    }
    // Step 0 reads the caller's k/v in place; later steps the packed block.
    const float* kb = j == 0 ? k : block[cur].data();
    const float* vb = j == 0 ? v : block[cur].data() + p.kv();
    const int32_t* pb = j == 0 ? k_pos : packed_pos(block[cur].data(), p);
    const AttentionDims& dj = j == 0 ? d : dp;
    if (masked(q_host.data(), host_positions(pb, dj.batch, dj.kv_len).data(), dj)) {
      ++st.blocks_skipped;
      if (j == 0) clear_output(out, lse, d);
    } else if (j == 0) {
      ++st.blocks_attended;
      attention_forward(out, lse, q, kb, vb, q_pos, pb, dj);
    } else {
      ++st.blocks_attended;
      attention_forward(part_out.data(), part_lse.data(), q, kb, vb, q_pos, pb, dj);
      attention_merge(out, lse, part_out.data(), part_lse.data(), d);
    }
    if (j + 1 < P) {
      send.wait();
      recv.wait();
      ++st.exchanges;
      cur = 1 - cur;
    }
  }
  return st;
}

CpStats ring_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                const float* lse, const float* q, const float* k, const float* v,
                                const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d, Group& cp,
                                std::string_view site) {
  check_dims(d, "ring_attention_backward");
  const int P = cp.size(), r = cp.rank();
  const int next = (r + 1) % P, prev = (r + P - 1) % P;
  const Packing p = packing(d);
  const AttentionDims dp = Packing::dims(d);
  const std::string kv_lab = kv_label(site, "ring_attention k,v,pos", "backward", p);
  const std::string dkv_lab =
      tp::comm_label(site, "ring_attention dk,dv", "backward", {p.B, p.Tk, 2 * p.row});
  // block: k/v/pos in flight (double-buffered); acc: the travelling dk/dv being
  // sent (double-buffered: one may still be on the wire); inbox: the one received.
  Tensor block[2], acc[2], inbox;
  if (P > 1) {
    const CallPlan plan = call_plan(d, CpImpl::ring, P, Pass::backward);
    for (int i = 0; i < 2; ++i) {
      block[i] = plan.make(i == 0 ? "kv_block.0" : "kv_block.1");
      acc[i] = plan.make(i == 0 ? "dkv_send.0" : "dkv_send.1");
    }
    inbox = plan.make("dkv_inbox");
    pack(block[0].data(), k, v, k_pos, p, d.kv_stride);
  }
  CpStats st;
  const HostView<int32_t> q_host = host_positions(q_pos, d.batch, d.q_len);
  Work acc_send[2], inbox_recv;
  int cur = 0;
  for (int j = 0; j < P; ++j) {
    Work send, recv;
    if (j + 1 < P) {
      recv = cp.recv_async(block[1 - cur].data(), p.numel(), ElemType::f32, prev, kTagKv, kv_lab);
      send = cp.send_async(block[cur].data(), p.numel(), ElemType::f32, next, kTagKv, kv_lab);
    }
    if (j == 0) {  // own block: straight into the caller's dk/dv
      if (masked(q_host.data(), host_positions(k_pos, d.batch, d.kv_len).data(), d)) {
        ++st.blocks_skipped;
      } else {
        ++st.blocks_attended;
        attention_backward(dq, dk, dv, dout, out, lse, q, k, v, q_pos, k_pos, d);
      }
    } else {
      float* a = acc[j % 2].data();
      acc_send[j % 2].wait();  // the buffer's previous message has left
      acc[j % 2].zero();
      const float* b = block[cur].data();
      const int32_t* pb = packed_pos(b, p);
      if (masked(q_host.data(), host_positions(pb, dp.batch, dp.kv_len).data(), dp)) {
        ++st.blocks_skipped;
      } else {
        ++st.blocks_attended;
        attention_backward(dq, a, a + p.kv(), dout, out, lse, q, b, b + p.kv(), q_pos, pb, dp);
      }
      if (j >= 2) {  // the terms of ranks r−j+1 … r−1 for this block
        inbox_recv.wait();
        add(a, inbox.data(), 2 * p.kv());
      }
      acc_send[j % 2] = cp.send_async(a, 2 * p.kv(), ElemType::f32, next, kTagDkv, dkv_lab);
      inbox_recv = cp.recv_async(inbox.data(), 2 * p.kv(), ElemType::f32, prev, kTagDkv, dkv_lab);
      ++st.exchanges;
    }
    if (j + 1 < P) {
      send.wait();
      recv.wait();
      ++st.exchanges;
      cur = 1 - cur;
    }
  }
  if (P > 1) {  // this rank's own block, back with every other rank's terms
    inbox_recv.wait();
    add_dkv(dk, dv, inbox.data(), p, d.kv_stride);
    acc_send[0].wait();
    acc_send[1].wait();
  }
  return st;
}

namespace {

// K/V and positions of every rank, batch-major for one attention call:
// k, v [B, P·Tk, KV·D], pos [B, P·Tk]; rank s's tokens at [s·Tk, (s+1)·Tk).
struct Gathered {
  explicit Gathered(int64_t positions) : pos(positions) {}
  Tensor k, v;
  DeviceScratch<int32_t> pos;
  AttentionDims d;
};

// n floats (or int32s) from src to dst on the run's device.
template <class T>
void copy_n(T* dst, const T* src, int64_t n) {
  copy_bytes(dst, src, n * int64_t{sizeof(T)});
}

void gather_kv(Gathered& g, const float* k, const float* v, const int32_t* k_pos, const AttentionDims& d,
               Group& cp, const CallPlan& plan, const std::string& label) {
  const int P = cp.size();
  const Packing p = packing(d);
  Tensor mine = plan.make("kv_mine"), all = plan.make("kv_all");
  pack(mine.data(), k, v, k_pos, p, d.kv_stride);
  cp.all_gather(mine.data(), all.data(), p.numel(), ElemType::f32, label);
  g.d = Packing::dims(d);
  g.d.kv_len = P * p.Tk;
  g.k = plan.make("k_all");  // [B, P·Tk, KV·D] each
  g.v = plan.make("v_all");
  for (int s = 0; s < P; ++s) {
    const float* src = all.data() + s * p.numel();
    for (int64_t b = 0; b < p.B; ++b) {
      const int64_t from = b * p.Tk, to = b * g.d.kv_len + s * p.Tk;
      copy_n(g.k.data() + to * p.row, src + from * p.row, p.Tk * p.row);
      copy_n(g.v.data() + to * p.row, src + p.kv() + from * p.row, p.Tk * p.row);
      copy_n(g.pos.data() + to, packed_pos(src, p) + from, p.Tk);
    }
  }
}

}  // namespace

CpStats allgather_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                    const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                                    Group& cp, std::string_view site) {
  check_dims(d, "allgather_attention_forward");
  const std::string label = kv_label(site, "allgather_attention k,v,pos", "forward", packing(d));
  Gathered g(packing(d).B * cp.size() * packing(d).Tk);
  gather_kv(g, k, v, k_pos, d, cp, call_plan(d, CpImpl::allgather, cp.size(), Pass::forward), label);
  attention_forward(out, lse, q, g.k.data(), g.v.data(), q_pos, g.pos.data(), g.d);
  return CpStats{1, 0, 1};
}

CpStats allgather_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                     const float* lse, const float* q, const float* k, const float* v,
                                     const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                                     Group& cp, std::string_view site) {
  check_dims(d, "allgather_attention_backward");
  const int P = cp.size();
  const Packing p = packing(d);
  const CallPlan plan = call_plan(d, CpImpl::allgather, P, Pass::backward);
  Gathered g(p.B * P * p.Tk);
  gather_kv(g, k, v, k_pos, d, cp, plan, kv_label(site, "allgather_attention k,v,pos", "backward", p));
  Tensor gk = plan.make("dk_all"), gv = plan.make("dv_all");
  attention_backward(dq, gk.data(), gv.data(), dout, out, lse, q, g.k.data(), g.v.data(), q_pos, g.pos.data(),
                     g.d);
  // Rank-major [P][dk | dv] for the reduce-scatter: slot s holds rank s's keys.
  Tensor send = plan.make("dkv_send"), mine = plan.make("dkv_mine");
  for (int s = 0; s < P; ++s) {
    float* dst = send.data() + s * 2 * p.kv();
    for (int64_t b = 0; b < p.B; ++b) {
      const int64_t from = b * g.d.kv_len + s * p.Tk, to = b * p.Tk;
      copy_n(dst + to * p.row, gk.data() + from * p.row, p.Tk * p.row);
      copy_n(dst + p.kv() + to * p.row, gv.data() + from * p.row, p.Tk * p.row);
    }
  }
  cp.reduce_scatter(send.data(), mine.data(), 2 * p.kv(), ElemType::f32, ReduceOp::sum,
                    tp::comm_label(site, "allgather_attention dk,dv", "backward", {P, p.B, p.Tk, 2 * p.row}));
  add_dkv(dk, dv, mine.data(), p, d.kv_stride);
  return CpStats{1, 0, 2};
}

}  // namespace mt::cp

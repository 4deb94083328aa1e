// Context parallelism in the canonical mode: the piece layout and the
// attention over fixed key chunks (contracts in the header).
#include "parallel/cp_canonical.h"

#include <cstring>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/primitives.h"
#include "parallel/tp_comm.h"

namespace mt::cp {
namespace {

constexpr int kTagBlock = 0x4352;  // a rank's packed k/v/pos, or its dK/dV pairs, on the ring

// Where the chunks of a sequence live under grain C on a cp group of P ranks.
struct Layout {
  int C = 1, P = 1, r = 0;
  int64_t k = 1;   // pieces a rank: C / P
  int64_t c = 0;   // tokens a chunk
  int64_t Tl = 0;  // tokens a rank holds of a sequence: 2·k·c

  Layout(int64_t T_local, int C_, Group* cp) : C(C_) {
    P = cp != nullptr ? cp->size() : 1;
    r = cp != nullptr ? cp->rank() : 0;
    MT_CHECK(C % P == 0 && T_local % (2 * (C / P)) == 0, "canonical cp: ", P, " ranks, grain ", C, " and ",
             T_local, " local tokens do not make whole chunks");
    k = C / P;
    Tl = T_local;
    c = Tl / (2 * k);
  }
  // The global chunk index of local chunk l of rank s.
  int64_t global(int s, int64_t l) const {
    const int64_t p = s * k + l / 2;
    return l % 2 == 0 ? p : 2 * C - 1 - p;
  }
  // The rank and local chunk that hold global chunk g.
  std::pair<int, int64_t> owner(int64_t g) const {
    const bool early = g < C;
    const int64_t p = early ? g : 2 * C - 1 - g;
    return {static_cast<int>(p / k), 2 * (p % k) + (early ? 0 : 1)};
  }
};

// Calls f(local, global) for the T/P positions rank `rank` holds, in piece order.
template <class F>
void for_piece_rows(int64_t T, int C, int P, int rank, F f) {
  check_zigzag(T, C, "train.seq_len", "parallel.canonical_cp");
  MT_REQUIRE(P >= 1 && C % P == 0 && rank >= 0 && rank < P, ConfigError, "canonical cp: rank (", rank,
             ") of ", P, " ranks with grain ", C);
  const int64_t c = T / (2 * C), k = C / P;
  for (int64_t j = 0; j < k; ++j) {
    const int64_t p = rank * k + j;
    for (int64_t i = 0; i < c; ++i) {
      f((2 * j) * c + i, p * c + i);
      f((2 * j + 1) * c + i, (2 * C - 1 - p) * c + i);
    }
  }
}

void pack_block(float* dst, const float* k, const float* v, const int32_t* pos, const Packing& p,
                int64_t stride) {
  copy_rows(dst, p.row, k, stride, p.B * p.Tk, p.row);
  copy_rows(dst + p.kv(), p.row, v, stride, p.B * p.Tk, p.row);
  std::memcpy(dst + 2 * p.kv(), pos, static_cast<size_t>(p.B * p.Tk) * sizeof(int32_t));
}

// all[P·n] ← every rank's n floats of `mine` in rank order: one all-gather, or
// the ring's P − 1 hops with every block kept (mine is then all + r·n).
void collect(float* all, const float* mine, int64_t n, Group* cp, CpImpl impl, const std::string& label) {
  if (cp == nullptr || cp->size() == 1) return;
  const int P = cp->size(), r = cp->rank();
  if (impl == CpImpl::allgather) {
    cp->all_gather(mine, all, n, ElemType::f32, label);
    return;
  }
  for (int j = 1; j < P; ++j) {
    Work recv =
        cp->recv_async(all + ((r - j + P) % P) * n, n, ElemType::f32, (r + P - 1) % P, kTagBlock, label);
    Work send =
        cp->send_async(all + ((r - j + 1 + P) % P) * n, n, ElemType::f32, (r + 1) % P, kTagBlock, label);
    send.wait();
    recv.wait();
  }
}

bool gathers_apart(Group* cp, CpImpl impl) {
  return cp != nullptr && cp->size() > 1 && impl == CpImpl::allgather;
}

// The dims of one chunk pair: c queries of sequence b against c packed keys.
struct PairDims {
  AttentionDims d;
  AttentionDropout drop;
  PairDims(const AttentionDims& whole, const Layout& lay, int64_t b) : d(whole) {
    d.batch = 1;
    d.q_len = d.kv_len = lay.c;
    d.kv_stride = whole.n_kv_heads * whole.head_dim;
    if (whole.dropout != nullptr) {  // the mask of sequence b's global index
      drop = *whole.dropout;
      drop.seq = whole.dropout->seq + b;
      d.dropout = &drop;
    }
  }
  PairDims(const PairDims&) = delete;
};

// Every rank's packed k/v/pos in kv_all (plan entries kv_mine, kv_all).
Tensor gather_blocks(const float* k, const float* v, const int32_t* k_pos, const AttentionDims& d,
                     const Layout& lay, Group* cp, CpImpl impl, const CallPlan& plan,
                     const std::string& label) {
  const Packing p = packing(d);
  Tensor mine, all = plan.make("kv_all");
  float* own = all.data() + lay.r * p.numel();
  if (gathers_apart(cp, impl)) {
    mine = plan.make("kv_mine");
    own = mine.data();
  }
  pack_block(own, k, v, k_pos, p, d.kv_stride);
  collect(all.data(), own, p.numel(), cp, impl, label);
  return all;
}

// Pointers into global chunk g of sequence b of the gathered blocks.
struct KeyChunk {
  const float *k, *v;
  const int32_t* pos;
};
KeyChunk key_chunk(const float* all, const Packing& p, const Layout& lay, int64_t b, int64_t g) {
  const auto [s, l] = lay.owner(g);
  const float* block = all + s * p.numel();
  const int64_t row0 = b * lay.Tl + l * lay.c;
  return {block + row0 * p.row, block + p.kv() + row0 * p.row,
          reinterpret_cast<const int32_t*>(block + 2 * p.kv()) + row0};
}

std::string label_of(std::string_view site, const char* who, const char* dir, const Packing& p) {
  return tp::comm_label(site, who, dir, {p.B, p.Tk, 2 * p.row + 1});
}

}  // namespace

void piece_positions(int32_t* pos, int64_t T, int C, int P, int rank) {
  for_piece_rows(T, C, P, rank,
                 [&](int64_t local, int64_t global) { pos[local] = static_cast<int32_t>(global); });
}

void piece_slice(int32_t* out, const int32_t* in, int64_t B, int64_t T, int C, int P, int rank) {
  const int64_t Tl = T / P;
  for (int64_t b = 0; b < B; ++b)
    for_piece_rows(T, C, P, rank,
                   [&](int64_t local, int64_t global) { out[b * Tl + local] = in[b * T + global]; });
}

CallPlan canonical_call_plan(const AttentionDims& d, CpImpl impl, int P, int C, Pass pass) {
  const Packing p = packing(d);
  const int64_t k = C / P, c = d.q_len / (2 * k), H = d.n_heads;
  CallPlan plan;
  auto& b = plan.buffers;
  // kv_mine: freed once gathered, before the entry after kv_all is allocated.
  if (P > 1 && impl == CpImpl::allgather) b.push_back({"kv_mine", p.numel(), MemKind::comm, 2});
  b.push_back({"kv_all", P * p.numel(), MemKind::comm});
  if (pass == Pass::forward) {
    b.push_back({"run_lse", H * c, MemKind::scratch});
    b.push_back({"part_out", c * d.out_stride, MemKind::scratch});
    b.push_back({"part_lse", H * c, MemKind::scratch});
    return plan;
  }
  // Every (query chunk, key chunk) pair's dK | dV: [B·2k][2C][2·c·row].
  const int64_t parts = d.batch * 2 * k * 2 * C * 2 * c * p.row;
  b.push_back({"lse_chunk", H * c, MemKind::scratch});
  b.push_back({"dkv_parts", parts, MemKind::comm});
  if (P > 1) b.push_back({"dkv_all", P * parts, MemKind::comm});
  b.push_back({"dkv_acc", 2 * c * p.row, MemKind::scratch});
  return plan;
}

void canonical_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                                 const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                                 Group* cp, CpImpl impl, int C, std::string_view site) {
  const Layout lay(d.q_len, C, cp);
  const Packing p = packing(d);
  const CallPlan plan = canonical_call_plan(d, impl, lay.P, C, Pass::forward);
  const Tensor all = gather_blocks(k, v, k_pos, d, lay, cp, impl, plan,
                                   label_of(site, "canonical_attention k,v,pos", "forward", p));
  Tensor run_lse = plan.make("run_lse"), part_out = plan.make("part_out"), part_lse = plan.make("part_lse");
  const int64_t H = d.n_heads, c = lay.c;
  for (int64_t b = 0; b < d.batch; ++b) {
    const PairDims pd(d, lay, b);
    for (int64_t l = 0; l < 2 * lay.k; ++l) {
      const int64_t row0 = b * lay.Tl + l * c, gq = lay.global(lay.r, l);
      float* oc = out + row0 * d.out_stride;
      for (int64_t gk = 0; gk <= gq; ++gk) {  // ascending key chunks, whatever order they came in
        const KeyChunk kc = key_chunk(all.data(), p, lay, b, gk);
        if (gk == 0) {
          attention_forward(oc, run_lse.data(), q + row0 * d.q_stride, kc.k, kc.v, q_pos + row0, kc.pos,
                            pd.d);
          continue;
        }
        attention_forward(part_out.data(), part_lse.data(), q + row0 * d.q_stride, kc.k, kc.v, q_pos + row0,
                          kc.pos, pd.d);
        attention_merge(oc, run_lse.data(), part_out.data(), part_lse.data(), pd.d);
      }
      for (int64_t h = 0; h < H; ++h)
        std::memcpy(lse + (b * H + h) * lay.Tl + l * c, run_lse.data() + h * c,
                    static_cast<size_t>(c) * sizeof(float));
    }
  }
}

void canonical_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                                  const float* lse, const float* q, const float* k, const float* v,
                                  const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d,
                                  Group* cp, CpImpl impl, int C, std::string_view site) {
  const Layout lay(d.q_len, C, cp);
  const Packing p = packing(d);
  const CallPlan plan = canonical_call_plan(d, impl, lay.P, C, Pass::backward);
  const Tensor all = gather_blocks(k, v, k_pos, d, lay, cp, impl, plan,
                                   label_of(site, "canonical_attention k,v,pos", "backward", p));
  Tensor lse_c = plan.make("lse_chunk"), parts = plan.make("dkv_parts");
  const int64_t H = d.n_heads, c = lay.c, pair = 2 * c * p.row, n_parts = parts.numel();
  auto slot = [&](float* base, int64_t b, int64_t l, int64_t gk) {
    return base + ((b * 2 * lay.k + l) * 2 * C + gk) * pair;
  };
  for (int64_t b = 0; b < d.batch; ++b) {
    const PairDims pd(d, lay, b);
    for (int64_t l = 0; l < 2 * lay.k; ++l) {
      const int64_t row0 = b * lay.Tl + l * c, gq = lay.global(lay.r, l);
      for (int64_t h = 0; h < H; ++h)
        std::memcpy(lse_c.data() + h * c, lse + (b * H + h) * lay.Tl + l * c,
                    static_cast<size_t>(c) * sizeof(float));
      for (int64_t gk = 0; gk <= gq; ++gk) {  // dQ in ascending key chunks; each pair's dK, dV from zero
        const KeyChunk kc = key_chunk(all.data(), p, lay, b, gk);
        float* s = slot(parts.data(), b, l, gk);
        std::memset(s, 0, static_cast<size_t>(pair) * sizeof(float));
        attention_backward(dq + row0 * d.q_stride, s, s + c * p.row, dout + row0 * d.out_stride,
                           out + row0 * d.out_stride, lse_c.data(), q + row0 * d.q_stride, kc.k, kc.v,
                           q_pos + row0, kc.pos, pd.d);
      }
    }
  }
  Tensor gathered;
  const float* every = parts.data();  // rank s's pairs at every + s·n_parts
  if (lay.P > 1) {
    gathered = plan.make("dkv_all");
    if (impl == CpImpl::ring)
      std::memcpy(gathered.data() + lay.r * n_parts, parts.data(),
                  static_cast<size_t>(n_parts) * sizeof(float));
    collect(gathered.data(), impl == CpImpl::ring ? gathered.data() + lay.r * n_parts : parts.data(), n_parts,
            cp, impl, tp::comm_label(site, "canonical_attention dk,dv pairs", "backward", {lay.P, n_parts}));
    every = gathered.data();
  }
  Tensor acc = plan.make("dkv_acc");
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t l = 0; l < 2 * lay.k; ++l) {  // this rank's key chunks: the pairs in ascending query order
      const int64_t gk = lay.global(lay.r, l), row0 = b * lay.Tl + l * c;
      for (int64_t gq = gk; gq < 2 * C; ++gq) {
        const auto [s, lq] = lay.owner(gq);
        const float* part = slot(const_cast<float*>(every) + s * n_parts, b, lq, gk);
        if (gq == gk)
          std::memcpy(acc.data(), part, static_cast<size_t>(pair) * sizeof(float));
        else
          add(acc.data(), part, pair);
      }
      add_rows(dk + row0 * d.kv_stride, d.kv_stride, acc.data(), p.row, c, p.row);
      add_rows(dv + row0 * d.kv_stride, d.kv_stride, acc.data() + c * p.row, p.row, c, p.row);
    }
  }
}

}  // namespace mt::cp

// Backward of the CPU attention (attention.cpp has the forward).
//
// P is recomputed from q, k and the saved lse. Every output element has exactly
// one writer and sees its terms in a fixed order (key tiles ascending for dq;
// heads, then query tiles ascending for dk and dv), so there are no atomics and
// the result does not depend on the thread count. With enough (batch, kv head)
// pairs, one task per pair owns dk, dv of the pair and dq of its query heads;
// otherwise dk/dv tasks per key tile and dq tasks per query tile share the work
// (see attention_backward).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ops/attention.h"
#include "ops/attention_tiles.h"
#include "ops/cpu_kernels.h"
#include "ops/gemm.h"
#include "ops/vec_math.h"

namespace mt {
namespace {

using namespace attention_tiles;

// What the backward of one (query tile, key tile) pair reads.
struct BackwardTile {
  const float* q;     // [nq, q_stride]
  const float* dout;  // [nq, out_stride]
  const float* k;     // [nk, kv_stride]
  const float* v;     // [nk, kv_stride]
  const float* lse;   // [nq], +inf for a query that sees nothing
  const float* di;    // [nq], rowsum(dout ∘ out)
  const int32_t* q_pos;
  const int32_t* k_pos;
  int64_t nq, nk;
  bool all_visible;
  const AttentionDropout* dropout;  // null: none
  uint32_t seq, head;               // the tile's global sequence and head (dropout)
};

// P = exp(scale · Q·Kᵀ − lse) (0 where hidden) and dS = P ∘ (dO·Vᵀ − Di) · scale,
// both [nq, nk] with row stride kTileK. With dropout (mask factors Z, the
// forward's, regenerated): the P returned is P ∘ Z (what dV needs) and
// dS = P ∘ (Z ∘ dO·Vᵀ − Di) · scale; Di = rowsum(dO ∘ O) = Σ P ∘ Z ∘ dO·Vᵀ still.
void probs_and_dscores(float* P, float* dS, const BackwardTile& t, const AttentionDims& d, float scale) {
  cpu::sgemm(Trans::no, Trans::yes, t.nq, t.nk, d.head_dim, t.q, d.q_stride, t.k, d.kv_stride, P, kTileK,
             Out::assign);
  cpu::sgemm(Trans::no, Trans::yes, t.nq, t.nk, d.head_dim, t.dout, d.out_stride, t.v, d.kv_stride, dS,
             kTileK, Out::assign);
  for (int64_t r = 0; r < t.nq; ++r) {
    float* p = P + r * kTileK;
    float* ds = dS + r * kTileK;
    if (!t.all_visible) mask_row(p, t.nk, t.k_pos, t.q_pos[r]);
    const float L = t.lse[r], Di = t.di[r];
    if (t.dropout) {
      const DropoutKey& key = t.dropout->key;
      const auto qpos = static_cast<uint32_t>(t.q_pos[r]);
      for (int64_t c = 0; c < t.nk; ++c) {
        const float pc = exp_vec(p[c] * scale - L);
        const float z = dropout_factor(key, qpos, static_cast<uint32_t>(t.k_pos[c]), t.head, t.seq);
        p[c] = pc * z;
        ds[c] = pc * (ds[c] * z - Di) * scale;
      }
      continue;
    }
#pragma omp simd
    for (int64_t c = 0; c < t.nk; ++c) {
      const float pc = exp_vec(p[c] * scale - L);
      p[c] = pc;
      ds[c] = pc * (ds[c] - Di) * scale;
    }
  }
}

// The whole backward's inputs and the tiling over them.
struct Backward {
  const AttentionDims& d;
  const float *dout, *out, *lse, *q, *k, *v;
  const int32_t *q_pos, *k_pos;
  float *dq, *dk, *dv;
  int64_t group, nq_tiles, nk_tiles;
  float scale;
  std::vector<PosRange> q_ranges, k_ranges;
  // Di = rowsum(dout ∘ out) and the lse with −inf replaced by +inf (so that a
  // query that sees nothing gets P = 0), both [B, H, Tq].
  std::vector<float> di, lse_eff;

  void row_terms() {
    const int64_t B = d.batch, Tq = d.q_len, H = d.n_heads, D = d.head_dim;
    di.resize(static_cast<size_t>(B * H * Tq));
    lse_eff.resize(di.size());
#pragma omp parallel for schedule(static)
    for (int64_t bh = 0; bh < B * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      for (int64_t i = 0; i < Tq; ++i) {
        const float* o = out + (b * Tq + i) * d.out_stride + h * D;
        const float* go = dout + (b * Tq + i) * d.out_stride + h * D;
        float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
        for (int64_t c = 0; c < D; ++c)
          acc += o[c] * go[c];
        di[static_cast<size_t>(bh * Tq + i)] = acc;
        const float L = lse[bh * Tq + i];
        lse_eff[static_cast<size_t>(bh * Tq + i)] = L == kNegInf ? std::numeric_limits<float>::infinity() : L;
      }
    }
  }

  // Fills t for the tile pair (query tile qt of head h, key tile kt) of
  // sequence b; false when every key of the tile is hidden from every query.
  bool tile(int64_t b, int64_t h, int64_t qt, int64_t kt, BackwardTile& t) const {
    const int64_t Tq = d.q_len, Tk = d.kv_len, H = d.n_heads, D = d.head_dim;
    const PosRange qr = q_ranges[static_cast<size_t>(b * nq_tiles + qt)];
    const PosRange kr = k_ranges[static_cast<size_t>(b * nk_tiles + kt)];
    if (kr.lo > qr.hi) return false;  // fully hidden
    const int64_t q0 = qt * kTileQ, k0 = kt * kTileK, g = h / group;
    t.q = q + (b * Tq + q0) * d.q_stride + h * D;
    t.dout = dout + (b * Tq + q0) * d.out_stride + h * D;
    t.k = k + (b * Tk + k0) * d.kv_stride + g * D;
    t.v = v + (b * Tk + k0) * d.kv_stride + g * D;
    t.lse = lse_eff.data() + (b * H + h) * Tq + q0;
    t.di = di.data() + (b * H + h) * Tq + q0;
    t.q_pos = q_pos + b * Tq + q0;
    t.k_pos = k_pos + b * Tk + k0;
    t.nq = std::min(kTileQ, Tq - q0);
    t.nk = std::min(kTileK, Tk - k0);
    t.all_visible = kr.hi <= qr.lo;
    t.dropout = d.dropout;
    if (d.dropout) {
      t.seq = static_cast<uint32_t>(d.dropout->seq[b]);
      t.head = static_cast<uint32_t>(d.dropout->head0 + h);
    }
    return true;
  }
  float* dq_at(int64_t b, int64_t h, int64_t qt) const {
    return dq + (b * d.q_len + qt * kTileQ) * d.q_stride + h * d.head_dim;
  }
  float* dkv_at(float* base, int64_t b, int64_t g, int64_t kt) const {
    return base + (b * d.kv_len + kt * kTileK) * d.kv_stride + g * d.head_dim;
  }
};

// One thread's scratch: P and dS of the current tile pair, and the pair.
struct TileWork {
  std::vector<float> p_buf = std::vector<float>(static_cast<size_t>(kTileQ * kTileK));
  std::vector<float> ds_buf = std::vector<float>(static_cast<size_t>(kTileQ * kTileK));
  BackwardTile t{};

  // dV += Pᵀ · dO;  dK += dSᵀ · Q  for the tile in t (P and dS already computed).
  void add_dkv(const Backward& w, float* dkb, float* dvb) {
    const int64_t D = w.d.head_dim;
    cpu::sgemm(Trans::yes, Trans::no, t.nk, D, t.nq, p_buf.data(), kTileK, t.dout, w.d.out_stride, dvb,
               w.d.kv_stride, Out::add);
    cpu::sgemm(Trans::yes, Trans::no, t.nk, D, t.nq, ds_buf.data(), kTileK, t.q, w.d.q_stride, dkb,
               w.d.kv_stride, Out::add);
  }
  // dQ += dS · K for the tile in t.
  void add_dq(const Backward& w, float* dqb) {
    cpu::sgemm(Trans::no, Trans::no, t.nq, w.d.head_dim, t.nk, ds_buf.data(), kTileK, t.k, w.d.kv_stride, dqb,
               w.d.q_stride, Out::add);
  }
  bool next(const Backward& w, int64_t b, int64_t h, int64_t qt, int64_t kt) {
    if (!w.tile(b, h, qt, kt, t)) return false;
    probs_and_dscores(p_buf.data(), ds_buf.data(), t, w.d, w.scale);
    return true;
  }
};

// One task per (batch, kv head): dk, dv of the pair and dq of its query heads.
// Called inside a parallel region (the loop is shared among its threads).
void backward_fused(const Backward& w, TileWork& tw) {
  const int64_t KV = w.d.n_kv_heads;
#pragma omp for schedule(dynamic, 1)
  for (int64_t task = 0; task < w.d.batch * KV; ++task) {
    const int64_t b = task / KV, g = task % KV;
    for (int64_t kt = 0; kt < w.nk_tiles; ++kt) {
      float* dkb = w.dkv_at(w.dk, b, g, kt);
      float* dvb = w.dkv_at(w.dv, b, g, kt);
      for (int64_t h = g * w.group; h < (g + 1) * w.group; ++h) {
        for (int64_t qt = 0; qt < w.nq_tiles; ++qt) {
          if (!tw.next(w, b, h, qt, kt)) continue;
          tw.add_dkv(w, dkb, dvb);
          tw.add_dq(w, w.dq_at(b, h, qt));
        }
      }
    }
  }
}

// dk/dv tasks per key tile, then dq tasks per query tile (each recomputes P
// and dS). Called inside a parallel region.
void backward_two_passes(const Backward& w, TileWork& tw) {
  const int64_t KV = w.d.n_kv_heads, H = w.d.n_heads, nk_tiles = w.nk_tiles, nq_tiles = w.nq_tiles;
#pragma omp for schedule(dynamic, 1) nowait
  for (int64_t task = 0; task < w.d.batch * KV * nk_tiles; ++task) {
    const int64_t kt = task % nk_tiles, g = (task / nk_tiles) % KV, b = task / (nk_tiles * KV);
    float* dkb = w.dkv_at(w.dk, b, g, kt);
    float* dvb = w.dkv_at(w.dv, b, g, kt);
    for (int64_t h = g * w.group; h < (g + 1) * w.group; ++h) {
      for (int64_t qt = 0; qt < nq_tiles; ++qt) {
        if (tw.next(w, b, h, qt, kt)) tw.add_dkv(w, dkb, dvb);
      }
    }
  }
#pragma omp for schedule(dynamic, 1)
  for (int64_t task = 0; task < w.d.batch * H * nq_tiles; ++task) {
    const int64_t qt = task % nq_tiles, h = (task / nq_tiles) % H, b = task / (nq_tiles * H);
    for (int64_t kt = 0; kt < nk_tiles; ++kt) {
      if (tw.next(w, b, h, qt, kt)) tw.add_dq(w, w.dq_at(b, h, qt));
    }
  }
}

}  // namespace

void cpu::attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                             const float* lse, const float* q, const float* k, const float* v,
                             const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  validate(d);
  const int64_t B = d.batch, Tq = d.q_len, Tk = d.kv_len, KV = d.n_kv_heads;
  Backward w{.d = d,
             .dout = dout,
             .out = out,
             .lse = lse,
             .q = q,
             .k = k,
             .v = v,
             .q_pos = q_pos,
             .k_pos = k_pos,
             .dq = dq,
             .dk = dk,
             .dv = dv,
             .group = d.n_heads / KV,
             .nq_tiles = (Tq + kTileQ - 1) / kTileQ,
             .nk_tiles = (Tk + kTileK - 1) / kTileK,
             .scale = 1.0f / std::sqrt(static_cast<float>(d.head_dim)),
             .q_ranges = tile_ranges(q_pos, B, Tq, kTileQ),
             .k_ranges = tile_ranges(k_pos, B, Tk, kTileK),
             .di = {},
             .lse_eff = {}};
  w.row_terms();
  // One writer per output element either way. With at least two (batch, kv
  // head) pairs per thread, one task per pair owns dk, dv of the pair and dq of
  // its query heads (five tile products per tile pair). With fewer, the work is
  // split into dk/dv tasks per key tile and dq tasks per query tile, which
  // recompute P and dS (seven products per tile pair, but all threads busy).
  const bool fused = B * KV >= 2 * static_cast<int64_t>(omp_get_max_threads());
#pragma omp parallel
  {
    TileWork tw;  // per thread, once per call
    if (fused)
      backward_fused(w, tw);
    else
      backward_two_passes(w, tw);
  }
}

}  // namespace mt

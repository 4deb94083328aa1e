// Blockwise causal GQA attention (FlashAttention-2 schedule) on the CPU.
//
// Forward: one task per (batch, head, query tile). The task walks the key
// tiles its queries can see, keeps a running max m, running sum l and an
// unnormalised output accumulator per query (online softmax), and writes
// out = acc / l and lse = m + log l at the end.
//
// Backward: P is recomputed from q, k and the saved lse. Every output element
// has exactly one writer and sees its terms in a fixed order (key tiles
// ascending for dq; heads, then query tiles ascending for dk and dv), so there
// are no atomics and the result does not depend on the thread count. With
// enough (batch, kv head) pairs, one task per pair owns dk, dv of the pair and
// dq of its query heads; otherwise dk/dv tasks per key tile and dq tasks per
// query tile share the work (see attention_backward).
//
// Tile products go through sgemm; called inside an OpenMP parallel region the
// OpenMP build of OpenBLAS runs them on the calling thread.
#include "ops/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/gemm.h"
#include "ops/vec_math.h"

namespace mt {
namespace {

constexpr int64_t kTileQ = 64;  // queries per tile
constexpr int64_t kTileK = 64;  // keys per tile; also the row stride of the score scratch
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Smallest and largest position in one tile of one sequence.
struct PosRange {
  int32_t lo;
  int32_t hi;
};

// ranges[b · n_tiles + t] for the tiles of `tile` positions of each sequence.
std::vector<PosRange> tile_ranges(const int32_t* pos, int64_t B, int64_t T, int64_t tile) {
  const int64_t n_tiles = (T + tile - 1) / tile;
  std::vector<PosRange> ranges(static_cast<size_t>(B * n_tiles));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < n_tiles; ++t) {
      PosRange r{std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
      for (int64_t i = t * tile; i < std::min(T, (t + 1) * tile); ++i) {
        r.lo = std::min(r.lo, pos[b * T + i]);
        r.hi = std::max(r.hi, pos[b * T + i]);
      }
      ranges[static_cast<size_t>(b * n_tiles + t)] = r;
    }
  }
  return ranges;
}

void validate(const AttentionDims& d) {
  MT_REQUIRE(d.batch >= 0 && d.q_len >= 0 && d.kv_len >= 0, ConfigError, "attention: batch (", d.batch,
             "), q_len (", d.q_len, ") and kv_len (", d.kv_len, ") must be non-negative");
  MT_REQUIRE(d.n_heads >= 1 && d.n_kv_heads >= 1 && d.head_dim >= 1, ConfigError, "attention: n_heads (",
             d.n_heads, "), n_kv_heads (", d.n_kv_heads, ") and head_dim (", d.head_dim,
             ") must be positive");
  MT_REQUIRE(d.n_heads % d.n_kv_heads == 0, ConfigError, "attention: n_heads (", d.n_heads,
             ") must be divisible by n_kv_heads (", d.n_kv_heads, ")");
  MT_REQUIRE(d.q_stride >= d.n_heads * d.head_dim, ConfigError, "attention: q_stride (", d.q_stride,
             ") must be at least n_heads × head_dim (", d.n_heads * d.head_dim, ")");
  MT_REQUIRE(d.out_stride >= d.n_heads * d.head_dim, ConfigError, "attention: out_stride (", d.out_stride,
             ") must be at least n_heads × head_dim (", d.n_heads * d.head_dim, ")");
  MT_REQUIRE(d.kv_stride >= d.n_kv_heads * d.head_dim, ConfigError, "attention: kv_stride (", d.kv_stride,
             ") must be at least n_kv_heads × head_dim (", d.n_kv_heads * d.head_dim, ")");
}

// Hides the keys of one row of scores that the query cannot see (−inf).
inline void mask_row(float* s, int64_t nk, const int32_t* k_pos, int32_t q_pos) {
#pragma omp simd
  for (int64_t c = 0; c < nk; ++c)
    s[c] = k_pos[c] <= q_pos ? s[c] : kNegInf;
}

// max of s[0, n) (−inf when n = 0), in 16 independent lanes so that it
// vectorises without reassociation flags.
inline float row_max(const float* s, int64_t n) {
  constexpr int64_t kLanes = 16;
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, kNegInf);
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int64_t u = 0; u < kLanes; ++u)
      lanes[u] = lanes[u] < s[c + u] ? s[c + u] : lanes[u];
  }
  for (; c < n; ++c)
    lanes[0] = lanes[0] < s[c] ? s[c] : lanes[0];
  float mx = kNegInf;
  for (int64_t u = 0; u < kLanes; ++u)
    mx = mx < lanes[u] ? lanes[u] : mx;
  return mx;
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  validate(d);
  const int64_t B = d.batch, Tq = d.q_len, Tk = d.kv_len, H = d.n_heads, D = d.head_dim;
  const int64_t group = H / d.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t nq_tiles = (Tq + kTileQ - 1) / kTileQ;
  const int64_t nk_tiles = (Tk + kTileK - 1) / kTileK;
  const std::vector<PosRange> q_ranges = tile_ranges(q_pos, B, Tq, kTileQ);
  const std::vector<PosRange> k_ranges = tile_ranges(k_pos, B, Tk, kTileK);
  const int64_t n_tasks = B * H * nq_tiles;

#pragma omp parallel
  {
    // Per thread, once per call: scores/probabilities [kTileQ, kTileK], output
    // accumulator [kTileQ, D], running max and sum [kTileQ].
    std::vector<float> s_buf(static_cast<size_t>(kTileQ * kTileK));
    std::vector<float> acc_buf(static_cast<size_t>(kTileQ * D));
    std::vector<float> m_buf(kTileQ), l_buf(kTileQ);
    float* S = s_buf.data();
    float* acc = acc_buf.data();
    float* m = m_buf.data();
    float* l = l_buf.data();

#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < n_tasks; ++task) {
      // Query tiles in reverse so that the longest (latest) tiles start first.
      const int64_t qt = nq_tiles - 1 - task % nq_tiles;
      const int64_t h = (task / nq_tiles) % H;
      const int64_t b = task / (nq_tiles * H);
      const int64_t g = h / group;
      const int64_t q0 = qt * kTileQ, nq = std::min(kTileQ, Tq - q0);
      const PosRange qr = q_ranges[static_cast<size_t>(b * nq_tiles + qt)];
      const float* qb = q + (b * Tq + q0) * d.q_stride + h * D;
      const int32_t* qp = q_pos + b * Tq + q0;

      std::fill(acc, acc + nq * D, 0.0f);
      std::fill(m, m + nq, kNegInf);
      std::fill(l, l + nq, 0.0f);
      for (int64_t kt = 0; kt < nk_tiles; ++kt) {
        const PosRange kr = k_ranges[static_cast<size_t>(b * nk_tiles + kt)];
        if (kr.lo > qr.hi) continue;  // no query of the tile sees any key of the tile
        const bool all_visible = kr.hi <= qr.lo;
        const int64_t k0 = kt * kTileK, nk = std::min(kTileK, Tk - k0);
        const float* kb = k + (b * Tk + k0) * d.kv_stride + g * D;
        const float* vb = v + (b * Tk + k0) * d.kv_stride + g * D;
        const int32_t* kp = k_pos + b * Tk + k0;

        // S[nq, nk] = Q · Kᵀ
        sgemm(Trans::no, Trans::yes, nq, nk, D, qb, d.q_stride, kb, d.kv_stride, S, kTileK, Out::assign);
        for (int64_t r = 0; r < nq; ++r) {
          float* s = S + r * kTileK;
          if (!all_visible) mask_row(s, nk, kp, qp[r]);
          const float tile_max = scale * row_max(s, nk);  // scale > 0 commutes with max
          if (tile_max == kNegInf) {                      // this query sees no key of the tile
            std::fill(s, s + nk, 0.0f);
            continue;
          }
          const float m_new = std::max(m[r], tile_max);
          const float alpha = exp_vec(m[r] - m_new);  // 0 when m[r] = −inf
          float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
          for (int64_t c = 0; c < nk; ++c) {
            const float p = exp_vec(s[c] * scale - m_new);
            s[c] = p;
            sum += p;
          }
          l[r] = l[r] * alpha + sum;
          m[r] = m_new;
          if (alpha != 1.0f) {
            float* a = acc + r * D;
#pragma omp simd
            for (int64_t c = 0; c < D; ++c)
              a[c] *= alpha;
          }
        }
        // acc[nq, D] += P · V
        sgemm(Trans::no, Trans::no, nq, D, nk, S, kTileK, vb, d.kv_stride, acc, D, Out::add);
      }
      for (int64_t r = 0; r < nq; ++r) {
        float* o = out + (b * Tq + q0 + r) * d.out_stride + h * D;
        const float* a = acc + r * D;
        float& L = lse[(b * H + h) * Tq + q0 + r];
        if (l[r] == 0.0f) {  // the query sees no key at all
          std::fill(o, o + D, 0.0f);
          L = kNegInf;
          continue;
        }
        const float inv = 1.0f / l[r];
#pragma omp simd
        for (int64_t c = 0; c < D; ++c)
          o[c] = a[c] * inv;
        L = m[r] + std::log(l[r]);
      }
    }
  }
}

namespace {

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
};

// P = exp(scale · Q·Kᵀ − lse) (0 where hidden) and dS = P ∘ (dO·Vᵀ − Di) · scale,
// both [nq, nk] with row stride kTileK.
void probs_and_dscores(float* P, float* dS, const BackwardTile& t, const AttentionDims& d, float scale) {
  sgemm(Trans::no, Trans::yes, t.nq, t.nk, d.head_dim, t.q, d.q_stride, t.k, d.kv_stride, P, kTileK,
        Out::assign);
  sgemm(Trans::no, Trans::yes, t.nq, t.nk, d.head_dim, t.dout, d.out_stride, t.v, d.kv_stride, dS, kTileK,
        Out::assign);
  for (int64_t r = 0; r < t.nq; ++r) {
    float* p = P + r * kTileK;
    float* ds = dS + r * kTileK;
    if (!t.all_visible) mask_row(p, t.nk, t.k_pos, t.q_pos[r]);
    const float L = t.lse[r], Di = t.di[r];
#pragma omp simd
    for (int64_t c = 0; c < t.nk; ++c) {
      const float pc = exp_vec(p[c] * scale - L);
      p[c] = pc;
      ds[c] = pc * (ds[c] - Di) * scale;
    }
  }
}

}  // namespace

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  validate(d);
  const int64_t B = d.batch, Tq = d.q_len, Tk = d.kv_len, H = d.n_heads, KV = d.n_kv_heads, D = d.head_dim;
  const int64_t group = H / KV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t nq_tiles = (Tq + kTileQ - 1) / kTileQ;
  const int64_t nk_tiles = (Tk + kTileK - 1) / kTileK;
  const std::vector<PosRange> q_ranges = tile_ranges(q_pos, B, Tq, kTileQ);
  const std::vector<PosRange> k_ranges = tile_ranges(k_pos, B, Tk, kTileK);

  // Di = rowsum(dout ∘ out) and the lse with −inf replaced by +inf (so that a
  // query that sees nothing gets P = 0), both [B, H, Tq].
  std::vector<float> di(static_cast<size_t>(B * H * Tq)), lse_eff(static_cast<size_t>(B * H * Tq));
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

  const auto tile = [&](int64_t b, int64_t h, int64_t qt, int64_t kt, BackwardTile& t) {
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
    return true;
  };
  const auto dq_at = [&](int64_t b, int64_t h, int64_t qt) {
    return dq + (b * Tq + qt * kTileQ) * d.q_stride + h * D;
  };
  const auto dkv_at = [&](float* base, int64_t b, int64_t g, int64_t kt) {
    return base + (b * Tk + kt * kTileK) * d.kv_stride + g * D;
  };

  // One writer per output element either way. With at least two (batch, kv
  // head) pairs per thread, one task per pair owns dk, dv of the pair and dq of
  // its query heads (five tile products per tile pair). With fewer, the work is
  // split into dk/dv tasks per key tile and dq tasks per query tile, which
  // recompute P and dS (seven products per tile pair, but all threads busy).
  const bool fused = B * KV >= 2 * static_cast<int64_t>(omp_get_max_threads());

#pragma omp parallel
  {
    std::vector<float> p_buf(static_cast<size_t>(kTileQ * kTileK));  // per thread, once per call
    std::vector<float> ds_buf(static_cast<size_t>(kTileQ * kTileK));
    float* P = p_buf.data();
    float* dS = ds_buf.data();
    BackwardTile t{};
    // dV += Pᵀ · dO;  dK += dSᵀ · Q  for the tile in t (P and dS already computed).
    auto add_dkv = [&](float* dkb, float* dvb) {
      sgemm(Trans::yes, Trans::no, t.nk, D, t.nq, P, kTileK, t.dout, d.out_stride, dvb, d.kv_stride,
            Out::add);
      sgemm(Trans::yes, Trans::no, t.nk, D, t.nq, dS, kTileK, t.q, d.q_stride, dkb, d.kv_stride, Out::add);
    };
    if (fused) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < B * KV; ++task) {
        const int64_t b = task / KV, g = task % KV;
        for (int64_t kt = 0; kt < nk_tiles; ++kt) {
          float* dkb = dkv_at(dk, b, g, kt);
          float* dvb = dkv_at(dv, b, g, kt);
          for (int64_t h = g * group; h < (g + 1) * group; ++h) {
            for (int64_t qt = 0; qt < nq_tiles; ++qt) {
              if (!tile(b, h, qt, kt, t)) continue;
              probs_and_dscores(P, dS, t, d, scale);
              add_dkv(dkb, dvb);  // dQ += dS · K below
              sgemm(Trans::no, Trans::no, t.nq, D, t.nk, dS, kTileK, t.k, d.kv_stride, dq_at(b, h, qt),
                    d.q_stride, Out::add);
            }
          }
        }
      }
    } else {
#pragma omp for schedule(dynamic, 1) nowait
      for (int64_t task = 0; task < B * KV * nk_tiles; ++task) {
        const int64_t kt = task % nk_tiles, g = (task / nk_tiles) % KV, b = task / (nk_tiles * KV);
        float* dkb = dkv_at(dk, b, g, kt);
        float* dvb = dkv_at(dv, b, g, kt);
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          for (int64_t qt = 0; qt < nq_tiles; ++qt) {
            if (!tile(b, h, qt, kt, t)) continue;
            probs_and_dscores(P, dS, t, d, scale);
            add_dkv(dkb, dvb);
          }
        }
      }
#pragma omp for schedule(dynamic, 1)
      for (int64_t task = 0; task < B * H * nq_tiles; ++task) {
        const int64_t qt = task % nq_tiles, h = (task / nq_tiles) % H, b = task / (nq_tiles * H);
        for (int64_t kt = 0; kt < nk_tiles; ++kt) {
          if (!tile(b, h, qt, kt, t)) continue;
          probs_and_dscores(P, dS, t, d, scale);
          sgemm(Trans::no, Trans::no, t.nq, D, t.nk, dS, kTileK, t.k, d.kv_stride, dq_at(b, h, qt),
                d.q_stride, Out::add);
        }
      }
    }
  }
}

void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part,
                     const AttentionDims& d) {
  MT_REQUIRE(d.batch >= 0 && d.q_len >= 0 && d.n_heads >= 1 && d.head_dim >= 1, ConfigError,
             "attention_merge: batch (", d.batch, "), q_len (", d.q_len, "), n_heads (", d.n_heads,
             ") and head_dim (", d.head_dim, ") must be valid");
  MT_REQUIRE(d.out_stride >= d.n_heads * d.head_dim, ConfigError, "attention_merge: out_stride (",
             d.out_stride, ") must be at least n_heads × head_dim (", d.n_heads * d.head_dim, ")");
  const int64_t B = d.batch, T = d.q_len, H = d.n_heads, D = d.head_dim;
#pragma omp parallel for schedule(static)
  for (int64_t bt = 0; bt < B * T; ++bt) {
    const int64_t b = bt / T, t = bt % T;
    for (int64_t h = 0; h < H; ++h) {
      float& L = lse[(b * H + h) * T + t];
      const float Lp = lse_part[(b * H + h) * T + t];
      float* o = out + bt * d.out_stride + h * D;
      const float* op = out_part + bt * d.out_stride + h * D;
      if (Lp == kNegInf) {  // the part sees nothing: keep (out, lse)
        if (L == kNegInf) std::fill(o, o + D, 0.0f);
        continue;
      }
      if (L == kNegInf) {  // only the part sees keys
        std::copy(op, op + D, o);
        L = Lp;
        continue;
      }
      const float mx = std::max(L, Lp);
      const float L_new = mx + std::log(std::exp(L - mx) + std::exp(Lp - mx));
      const float w = std::exp(L - L_new), wp = std::exp(Lp - L_new);
      for (int64_t c = 0; c < D; ++c)
        o[c] = o[c] * w + op[c] * wp;
      L = L_new;
    }
  }
}

}  // namespace mt

// Blockwise causal GQA attention (FlashAttention-2 schedule) on the CPU: the
// forward and the merge of partial results. The backward is in
// attention_backward.cpp.
//
// Forward: one task per (batch, head, query tile). The task walks the key
// tiles its queries can see, keeps a running max m, running sum l and an
// unnormalised output accumulator per query (online softmax), and writes
// out = acc / l and lse = m + log l at the end.
//
// Tile products go through sgemm; called inside an OpenMP parallel region the
// OpenMP build of OpenBLAS runs them on the calling thread.
#include "ops/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/attention_tiles.h"
#include "ops/cpu_kernels.h"
#include "ops/gemm.h"
#include "ops/vec_math.h"

namespace mt {
namespace {

using namespace attention_tiles;

// One query tile's running state: the unnormalised output acc [nq, D], the
// running max m [nq] and sum l [nq].
struct RunningRows {
  float* acc;
  float* m;
  float* l;
};

// The online-softmax step of nq queries against one key tile: S [nq, nk] (row
// stride kTileK) holds the raw scores Q·Kᵀ on entry and exp(scale·s − m_new) on
// return (0 for hidden keys and for a query that sees no key of the tile); each
// row's m, l and acc are brought to the new running max.
void online_softmax_tile(float* S, const RunningRows& run, int64_t nq, int64_t nk, int64_t D, float scale,
                         const int32_t* kp, const int32_t* qp, bool all_visible) {
  float *acc = run.acc, *m = run.m, *l = run.l;
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
}

// Dropout of the probabilities P [nq, nk] (row stride kTileK) of head h in
// batch row b, after the running sum took them whole: the softmax's
// normaliser is that of the undropped probabilities, as in PyTorch's
// dropout(softmax(s)).
void dropout_tile(float* P, int64_t nq, int64_t nk, const AttentionDropout& dr, int64_t b, int64_t h,
                  const int32_t* qp, const int32_t* kp) {
  const auto seq = static_cast<uint32_t>(dr.seq[b]), head = static_cast<uint32_t>(dr.head0 + h);
  for (int64_t r = 0; r < nq; ++r) {
    float* p = P + r * kTileK;
    for (int64_t c = 0; c < nk; ++c)
      p[c] *= dropout_factor(dr.key, static_cast<uint32_t>(qp[r]), static_cast<uint32_t>(kp[c]), head, seq);
  }
}

// out rows = acc / l and lse = m + log l, for the nq queries of a tile; a query
// that saw no key gets out = 0 and lse = −inf. out has row stride out_stride,
// lse is contiguous.
void finish_rows(float* out, float* lse, const RunningRows& run, int64_t nq, int64_t D, int64_t out_stride) {
  for (int64_t r = 0; r < nq; ++r) {
    float* o = out + r * out_stride;
    const float* a = run.acc + r * D;
    float& L = lse[r];
    if (run.l[r] == 0.0f) {  // the query sees no key at all
      std::fill(o, o + D, 0.0f);
      L = kNegInf;
      continue;
    }
    const float inv = 1.0f / run.l[r];
#pragma omp simd
    for (int64_t c = 0; c < D; ++c)
      o[c] = a[c] * inv;
    L = run.m[r] + std::log(run.l[r]);
  }
}

}  // namespace

void cpu::attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
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
    const RunningRows run{acc_buf.data(), m_buf.data(), l_buf.data()};

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

      std::fill(run.acc, run.acc + nq * D, 0.0f);
      std::fill(run.m, run.m + nq, kNegInf);
      std::fill(run.l, run.l + nq, 0.0f);
      for (int64_t kt = 0; kt < nk_tiles; ++kt) {
        const PosRange kr = k_ranges[static_cast<size_t>(b * nk_tiles + kt)];
        if (kr.lo > qr.hi) continue;  // no query of the tile sees any key of the tile
        const int64_t k0 = kt * kTileK, nk = std::min(kTileK, Tk - k0);
        const float* kb = k + (b * Tk + k0) * d.kv_stride + g * D;
        const float* vb = v + (b * Tk + k0) * d.kv_stride + g * D;
        // S[nq, nk] = Q · Kᵀ, turned into probabilities; acc[nq, D] += P · V
        cpu::sgemm(Trans::no, Trans::yes, nq, nk, D, qb, d.q_stride, kb, d.kv_stride, S, kTileK, Out::assign);
        online_softmax_tile(S, run, nq, nk, D, scale, k_pos + b * Tk + k0, qp, kr.hi <= qr.lo);
        if (d.dropout) dropout_tile(S, nq, nk, *d.dropout, b, h, qp, k_pos + b * Tk + k0);
        cpu::sgemm(Trans::no, Trans::no, nq, D, nk, S, kTileK, vb, d.kv_stride, run.acc, D, Out::add);
      }
      finish_rows(out + (b * Tq + q0) * d.out_stride + h * D, lse + (b * H + h) * Tq + q0, run, nq, D,
                  d.out_stride);
    }
  }
}

void cpu::attention_merge(float* out, float* lse, const float* out_part, const float* lse_part,
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

#include "ops/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace mt::ref {
namespace {

// Pointer offsets of the row of token t of sequence b, head column block `head`.
int64_t q_at(const AttentionDims& d, int64_t b, int64_t t, int64_t h) {
  return (b * d.q_len + t) * d.q_stride + h * d.head_dim;
}
int64_t kv_at(const AttentionDims& d, int64_t b, int64_t t, int64_t g) {
  return (b * d.kv_len + t) * d.kv_stride + g * d.head_dim;
}
int64_t out_at(const AttentionDims& d, int64_t b, int64_t t, int64_t h) {
  return (b * d.q_len + t) * d.out_stride + h * d.head_dim;
}

// The dropout factor of (query i, key j) of head h in row b: 1 without dropout.
double keep(const AttentionDims& d, int64_t b, int64_t h, int32_t qpos, int32_t kpos) {
  if (d.dropout == nullptr) return 1.0;
  return dropout_factor(d.dropout->key, static_cast<uint32_t>(qpos), static_cast<uint32_t>(kpos),
                        static_cast<uint32_t>(d.dropout->head0 + h),
                        static_cast<uint32_t>(d.dropout->seq[b]));
}

double dot(const double* a, const double* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i)
    s += a[i] * b[i];
  return s;
}

}  // namespace

void attention_forward(double* out, double* lse, const double* q, const double* k, const double* v,
                       const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  const int64_t D = d.head_dim, group = d.n_heads / d.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  std::vector<double> s(static_cast<size_t>(d.kv_len));
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.n_heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < d.q_len; ++i) {
        // scores of the visible keys, −inf for the hidden ones
        double mx = neg_inf;
        for (int64_t j = 0; j < d.kv_len; ++j) {
          const bool visible = k_pos[b * d.kv_len + j] <= q_pos[b * d.q_len + i];
          s[j] = visible ? scale * dot(q + q_at(d, b, i, h), k + kv_at(d, b, j, g), D) : neg_inf;
          mx = std::max(mx, s[j]);
        }
        double* o = out + out_at(d, b, i, h);
        double& L = lse[(b * d.n_heads + h) * d.q_len + i];
        std::fill(o, o + D, 0.0);
        if (mx == neg_inf) {
          L = neg_inf;
          continue;
        }
        double sum = 0;
        for (int64_t j = 0; j < d.kv_len; ++j)
          sum += std::exp(s[j] - mx);
        L = mx + std::log(sum);
        for (int64_t j = 0; j < d.kv_len; ++j) {
          const double p =
              std::exp(s[j] - L) * keep(d, b, h, q_pos[b * d.q_len + i], k_pos[b * d.kv_len + j]);
          const double* vj = v + kv_at(d, b, j, g);
          for (int64_t c = 0; c < D; ++c)
            o[c] += p * vj[c];
        }
      }
    }
  }
}

void attention_backward(double* dq, double* dk, double* dv, const double* dout, const double* out,
                        const double* lse, const double* q, const double* k, const double* v,
                        const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  // With P_ij = exp(s_ij − lse_i), s_ij = scale · q_i·k_j, dropout factors Z_ij
  // (1 without dropout) and out_i = Σ_j P_ij Z_ij v_j:
  //   dP_ij = Z_ij dout_i·v_j,  D_i = Σ_j P_ij dP_ij = dout_i·out_i,  dS_ij = P_ij (dP_ij − D_i)
  //   dq_i += scale Σ_j dS_ij k_j,  dk_j += scale Σ_i dS_ij q_i,  dv_j += Σ_i P_ij Z_ij dout_i
  const int64_t D = d.head_dim, group = d.n_heads / d.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  const double neg_inf = -std::numeric_limits<double>::infinity();
  for (int64_t b = 0; b < d.batch; ++b) {
    for (int64_t h = 0; h < d.n_heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < d.q_len; ++i) {
        const double L = lse[(b * d.n_heads + h) * d.q_len + i];
        if (L == neg_inf) continue;  // the query sees no key: no gradient
        const double* qi = q + q_at(d, b, i, h);
        const double* gi = dout + out_at(d, b, i, h);
        const double Di = dot(gi, out + out_at(d, b, i, h), D);
        for (int64_t j = 0; j < d.kv_len; ++j) {
          if (k_pos[b * d.kv_len + j] > q_pos[b * d.q_len + i]) continue;
          const double* kj = k + kv_at(d, b, j, g);
          const double* vj = v + kv_at(d, b, j, g);
          const double p = std::exp(scale * dot(qi, kj, D) - L);
          const double z = keep(d, b, h, q_pos[b * d.q_len + i], k_pos[b * d.kv_len + j]);
          const double ds = p * (z * dot(gi, vj, D) - Di);
          double* dqi = dq + q_at(d, b, i, h);
          double* dkj = dk + kv_at(d, b, j, g);
          double* dvj = dv + kv_at(d, b, j, g);
          for (int64_t c = 0; c < D; ++c) {
            dqi[c] += scale * ds * kj[c];
            dkj[c] += scale * ds * qi[c];
            dvj[c] += p * z * gi[c];
          }
        }
      }
    }
  }
}

}  // namespace mt::ref

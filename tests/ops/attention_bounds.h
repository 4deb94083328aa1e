// Derived bounds of the attention kernels (ops/attention.h) for the tests of
// tests/ops/test_attention*.cpp, on attention_problem.h's problems.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "attention_problem.h"
#include "bounds.h"
#include "ops/dropout.h"

namespace mt::attention_test {

// Derived bounds of the fp32 kernels against the exact values (tests/bounds.h;
// docs/MODEL.md "Test bounds"), element by element, first order in u (the
// second-order terms, below 1e-9 relative, are covered by a factor 1.01).
// With s = scale·q·k the exact scores, P = exp(s − lse), nkt and nqt the
// numbers of 64-key and 64-query tiles, and kExpRel exp_vec's 2 ulp:
// - a score is off by eS = scale·γ_D·Σ|q_c k_c| + γ_3·|s| (the sgemm dot in any
//   order; the rounded scale 1/√D and the product);
// - an unnormalised weight exp_vec(s − m) by Θ = eS + u·R + kExpRel + nkt·
//   (kExpRel + 2u) + u·R relatively (R: the query's range of scores, bounding
//   |s − m| and the running max's moves; each rescale by exp_vec(m_old − m_new)
//   costs kExpRel and two roundings);
// - out = Σ P̃·z·v / Σ P̃ with P̃ = P(1 + θ): out is off by Σ P·z·|v|·(Θ + Θ̄ +
//   2γ_{Tk+2nkt} + 2u), Θ̄ = Σ P·Θ (the normaliser), the γ's those of the two
//   fp32 sums and the division; lse = m + log l by Θ̄ + γ_{Tk+2nkt} + 2u·|lse −
//   m| + u·|lse| (the shift m cancels).
// - backward: Di = Σ out·dout off by γ_D·Σ|out·dout| + Σ|dout|·B_out; P
//   recomputed from the fp32 lse off by Θb = eS + u·|s − lse| + B_lse +
//   kExpRel; dS = P·(z·dP − Di)·scale by scale·P·(|z·dP − Di|·(Θb + γ_6) +
//   z·γ_D·Σ|dout·v| + eDi); dq, dk, dv sum those terms (Tk, or group·Tq, plus
//   the tiles' adds and the prefill) in fp32: Σ|δterm| + γ_n·Σ|term|.
struct Bounds {
  std::vector<double> out, lse, gx;
};

namespace bounds_detail {
constexpr double kExpRel = 0x1p-22;
using ::mt::testing::gamma_n;
using ::mt::testing::kU32;
}  // namespace bounds_detail

// Bounds of the forward's out [B·Tq·out_stride] and lse [B·H·Tq] on raw
// pointers (as the kernel takes them), so key blocks of their own can be bound.
inline void forward_bound(const float* q, const float* k, const float* v, const int32_t* q_pos,
                          const int32_t* k_pos, const AttentionDims& d, std::vector<double>& b_out,
                          std::vector<double>& b_lse) {
  using namespace bounds_detail;
  const int64_t B = d.batch, Tq = d.q_len, Tk = d.kv_len, H = d.n_heads, D = d.head_dim,
                group = H / d.n_kv_heads;
  const double scale = 1.0 / std::sqrt(double(D)), u = kU32;
  const double nkt = double((Tk + 63) / 64), g_sum = gamma_n(double(Tk) + 2 * nkt);
  b_out.assign(size_t(B * Tq * d.out_stride), 1e-300);
  b_lse.assign(size_t(B * H * Tq), 1e-300);
  std::vector<double> s(static_cast<size_t>(Tk)), eS(static_cast<size_t>(Tk)), z(static_cast<size_t>(Tk));
  std::vector<char> vis(static_cast<size_t>(Tk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i) {
        const float* qi = q + (b * Tq + i) * d.q_stride + h * D;
        double mx = -INFINITY, mn = INFINITY;
        std::fill(eS.begin(), eS.end(), 0.0);
        for (int64_t j = 0; j < Tk; ++j) {
          vis[j] = k_pos[b * Tk + j] <= q_pos[b * Tq + i];
          if (!vis[j]) continue;
          const float* kj = k + (b * Tk + j) * d.kv_stride + (h / group) * D;
          double dot = 0, mag = 0;
          for (int64_t c = 0; c < D; ++c) {
            dot += double(qi[c]) * kj[c];
            mag += std::abs(double(qi[c]) * kj[c]);
          }
          s[j] = scale * dot;
          eS[j] = scale * gamma_n(double(D)) * mag + gamma_n(3) * std::abs(s[j]);
          z[j] = d.dropout ? double(dropout_factor(
                                 d.dropout->key, uint32_t(q_pos[b * Tq + i]), uint32_t(k_pos[b * Tk + j]),
                                 uint32_t(d.dropout->head0 + h), uint32_t(d.dropout->seq[b])))
                           : 1.0;
          mx = std::max(mx, s[j]);
          mn = std::min(mn, s[j]);
        }
        if (mx == -INFINITY) continue;  // sees nothing: out = 0, lse = −inf, exactly
        const double R = mx - mn;
        double l = 0;
        for (int64_t j = 0; j < Tk; ++j)
          if (vis[j]) l += std::exp(s[j] - mx);
        const double lse = mx + std::log(l);
        double theta_bar = 0;
        std::vector<double> theta(static_cast<size_t>(Tk), 0.0), P(static_cast<size_t>(Tk), 0.0);
        for (int64_t j = 0; j < Tk; ++j) {
          if (!vis[j]) continue;
          P[j] = std::exp(s[j] - lse);
          theta[j] = eS[j] + 2 * u * R + kExpRel + nkt * (kExpRel + 2 * u);
          theta_bar += P[j] * theta[j];
        }
        for (int64_t c = 0; c < D; ++c) {
          double e = 0;
          for (int64_t j = 0; j < Tk; ++j) {
            if (!vis[j]) continue;
            const double vj = v[(b * Tk + j) * d.kv_stride + (h / group) * D + c];
            e += P[j] * z[j] * std::abs(vj) * (theta[j] + theta_bar + 2 * g_sum + 3 * u);
          }
          b_out[size_t((b * Tq + i) * d.out_stride + h * D + c)] = 1.01 * e + 1e-300;
        }
        const double eS_max = *std::max_element(eS.begin(), eS.end());  // m̃ − m
        b_lse[size_t((b * H + h) * Tq + i)] =
            1.01 * (theta_bar + g_sum + 2 * u * (std::abs(lse - mx) + eS_max) + u * std::abs(lse));
      }
}

// Bounds of the backward's gradients (accumulated onto `prefill`, in x's
// layout) given the forward's bounds b_out, b_lse of the out and lse it is fed.
inline std::vector<double> backward_bound(const Problem& p, const std::vector<float>& x,
                                          const std::vector<float>& dout, const std::vector<double>& out_ref,
                                          const std::vector<double>& lse_ref,
                                          const std::vector<double>& b_out, const std::vector<double>& b_lse,
                                          const std::vector<float>& prefill) {
  using namespace bounds_detail;
  const AttentionDims& d = p.d;
  const int64_t B = d.batch, Tq = d.q_len, Tk = d.kv_len, H = d.n_heads, D = d.head_dim,
                group = H / d.n_kv_heads;
  const double scale = 1.0 / std::sqrt(double(D)), u = kU32;
  const double nkt = double((Tk + 63) / 64), nqt = double((Tq + 63) / 64);
  // err: Σ|δterm|; mag: Σ|term| (with the prefill), per element of x.
  std::vector<double> err(x.size(), 0.0), mag(x.size(), 0.0);
  std::vector<double> nterms(x.size(), 0.0);
  for (size_t i = 0; i < x.size(); ++i)
    mag[i] = std::abs(double(prefill[i]));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < Tq; ++i) {
        const double L = lse_ref[size_t((b * H + h) * Tq + i)];
        if (L == -INFINITY) continue;
        const int64_t qo = p.q_off + (b * Tq + i) * d.q_stride + h * D,
                      oo = (b * Tq + i) * d.out_stride + h * D;
        double Di = 0, eDi = 0;
        for (int64_t c = 0; c < D; ++c) {
          Di += out_ref[size_t(oo + c)] * dout[size_t(oo + c)];
          eDi += gamma_n(double(D)) * std::abs(out_ref[size_t(oo + c)] * dout[size_t(oo + c)]) +
                 std::abs(double(dout[size_t(oo + c)])) * b_out[size_t(oo + c)];
        }
        const double eL = b_lse[size_t((b * H + h) * Tq + i)] + u * std::abs(L);  // + its rounding to fp32
        for (int64_t j = 0; j < Tk; ++j) {
          if (p.k_pos[size_t(b * Tk + j)] > p.q_pos[size_t(b * Tq + i)]) continue;
          const int64_t ko = p.k_off + (b * Tk + j) * d.kv_stride + g * D,
                        vo = p.v_off + (b * Tk + j) * d.kv_stride + g * D;
          double qk = 0, qk_mag = 0, dP = 0, dP_mag = 0;
          for (int64_t c = 0; c < D; ++c) {
            qk += double(x[size_t(qo + c)]) * x[size_t(ko + c)];
            qk_mag += std::abs(double(x[size_t(qo + c)]) * x[size_t(ko + c)]);
            dP += double(dout[size_t(oo + c)]) * x[size_t(vo + c)];
            dP_mag += std::abs(double(dout[size_t(oo + c)]) * x[size_t(vo + c)]);
          }
          const double s = scale * qk, P = std::exp(s - L);
          const double z =
              d.dropout ? double(dropout_factor(d.dropout->key, uint32_t(p.q_pos[size_t(b * Tq + i)]),
                                                uint32_t(p.k_pos[size_t(b * Tk + j)]),
                                                uint32_t(d.dropout->head0 + h), uint32_t(d.dropout->seq[b])))
                        : 1.0;
          const double eS = scale * gamma_n(double(D)) * qk_mag + gamma_n(3) * std::abs(s);
          const double theta_b = eS + u * std::abs(s - L) + eL + kExpRel;
          const double ds = P * (z * dP - Di) * scale;
          const double e_ds =
              scale * P *
              (std::abs(z * dP - Di) * (theta_b + gamma_n(6)) + z * gamma_n(double(D)) * dP_mag + eDi);
          for (int64_t c = 0; c < D; ++c) {
            const double kc = x[size_t(ko + c)], qc = x[size_t(qo + c)], gc = dout[size_t(oo + c)];
            err[size_t(qo + c)] += e_ds * std::abs(kc);
            mag[size_t(qo + c)] += std::abs(ds * kc);
            err[size_t(ko + c)] += e_ds * std::abs(qc);
            mag[size_t(ko + c)] += std::abs(ds * qc);
            err[size_t(vo + c)] += P * z * std::abs(gc) * (theta_b + u);
            mag[size_t(vo + c)] += P * z * std::abs(gc);
          }
        }
      }
    }
  std::vector<double> bound(x.size(), 1e-300);
  const double n_q = double(Tk) + 2 * nkt + 2, n_kv = double(group * Tq) + 2 * nqt * double(group) + 2;
  auto fill = [&](int64_t off, int64_t rows, int64_t stride, int64_t cols, double n) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        const size_t at = size_t(off + r * stride + c);
        bound[at] = 1.01 * (err[at] + gamma_n(n) * mag[at]) + 1e-300;
      }
  };
  fill(p.q_off, B * Tq, d.q_stride, H * D, n_q);
  fill(p.k_off, B * Tk, d.kv_stride, d.n_kv_heads * D, n_kv);
  fill(p.v_off, B * Tk, d.kv_stride, d.n_kv_heads * D, n_kv);
  return bound;
}

inline Bounds bounds_of(const Problem& p, const std::vector<float>& x) {
  Bounds b;
  forward_bound(x.data() + p.q_off, x.data() + p.k_off, x.data() + p.v_off, p.q_pos.data(), p.k_pos.data(),
                p.d, b.out, b.lse);
  return b;
}

// |a − b| ≤ bound elementwise; −inf must match exactly; any NaN fails.
template <typename A>
void expect_within(const std::vector<A>& a, const std::vector<double>& b, const std::vector<double>& bound,
                   const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  ASSERT_EQ(bound.size(), b.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double ai = static_cast<double>(a[i]);
    if (!std::isfinite(b[i])) {
      ASSERT_EQ(ai, b[i]) << what << " element " << i;
      continue;
    }
    ASSERT_TRUE(std::isfinite(ai)) << what << " element " << i << " is " << ai << ", expected " << b[i];
    const double diff = std::abs(ai - b[i]);
    const double r = diff == 0 ? 0 : diff / bound[i];
    if (r > worst) {
      worst = r;
      at = i;
    }
  }
  ::mt::testing::log_ratio(worst, what.c_str());
  EXPECT_LE(worst, 1.0) << what << ": element " << at << " is " << a[at] << ", expected " << b[at]
                        << ", bound " << bound[at];
}

}  // namespace mt::attention_test

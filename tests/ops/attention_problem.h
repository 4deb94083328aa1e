// The attention tests' problems (tests/ops/test_attention*.cpp): q, k and v
// in one buffer, the fast kernels and the double reference run on them, and
// the elementwise comparison with a tolerance scaled to the data.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "grad_check.h"
#include "ops/attention.h"
#include "ops/attention_reference.h"

namespace mt::attention_test {

using ::mt::testing::max_scaled_error;
using ::mt::testing::numeric_grad;
using ::mt::testing::to_double;

// q, k and v live in one input buffer x: either a fused QKV GEMM output
// [B, T, (H + 2·KV)·D] or three separate regions, rows padded by `pad` floats.
struct Problem {
  AttentionDims d;
  int64_t q_off = 0, k_off = 0, v_off = 0, n_in = 0;
  std::vector<int32_t> q_pos, k_pos;
  int64_t n_out() const { return d.batch * d.q_len * d.out_stride; }
  int64_t n_lse() const { return d.batch * d.n_heads * d.q_len; }
};

// Causal positions 0..T−1 unless q_first/k_first shift them (queries at q_first.., keys at k_first..).
inline Problem make_problem(int64_t B, int64_t Tq, int64_t Tk, int64_t H, int64_t KV, int64_t D, bool fused,
                            int64_t pad = 0, int32_t q_first = 0, int32_t k_first = 0) {
  Problem p;
  p.d = AttentionDims{B, Tq, Tk, H, KV, D, 0, 0, H * D + pad};
  if (fused) {
    EXPECT_EQ(Tq, Tk) << "a fused QKV buffer has one length";
    const int64_t w = (H + 2 * KV) * D + pad;
    p.d.q_stride = p.d.kv_stride = w;
    p.k_off = H * D;
    p.v_off = (H + KV) * D;
    p.n_in = B * Tq * w;
  } else {
    p.d.q_stride = H * D + pad;
    p.d.kv_stride = KV * D + pad;
    p.k_off = B * Tq * p.d.q_stride;
    p.v_off = p.k_off + B * Tk * p.d.kv_stride;
    p.n_in = p.v_off + B * Tk * p.d.kv_stride;
  }
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = 0; i < Tq; ++i)
      p.q_pos.push_back(q_first + static_cast<int32_t>(i));
    for (int64_t j = 0; j < Tk; ++j)
      p.k_pos.push_back(k_first + static_cast<int32_t>(j));
  }
  return p;
}

inline std::vector<float> random_vec(int64_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v)
    x = dist(gen);
  return v;
}

inline void fast_forward(const Problem& p, const std::vector<float>& x, std::vector<float>& out,
                         std::vector<float>& lse) {
  out.assign(static_cast<size_t>(p.n_out()), 7.0f);  // padding must stay untouched
  lse.assign(static_cast<size_t>(p.n_lse()), 7.0f);
  attention_forward(out.data(), lse.data(), x.data() + p.q_off, x.data() + p.k_off, x.data() + p.v_off,
                    p.q_pos.data(), p.k_pos.data(), p.d);
}

inline void ref_forward(const Problem& p, const std::vector<double>& x, std::vector<double>& out,
                        std::vector<double>& lse) {
  out.assign(static_cast<size_t>(p.n_out()), 7.0);
  lse.assign(static_cast<size_t>(p.n_lse()), 7.0);
  ref::attention_forward(out.data(), lse.data(), x.data() + p.q_off, x.data() + p.k_off, x.data() + p.v_off,
                         p.q_pos.data(), p.k_pos.data(), p.d);
}

// Accumulates the gradient of Σ dout·out into gx (the layout of x).
inline void fast_backward(const Problem& p, const std::vector<float>& x, const std::vector<float>& dout,
                          const std::vector<float>& out, const std::vector<float>& lse,
                          std::vector<float>& gx) {
  attention_backward(gx.data() + p.q_off, gx.data() + p.k_off, gx.data() + p.v_off, dout.data(), out.data(),
                     lse.data(), x.data() + p.q_off, x.data() + p.k_off, x.data() + p.v_off, p.q_pos.data(),
                     p.k_pos.data(), p.d);
}

inline void ref_backward(const Problem& p, const std::vector<double>& x, const std::vector<double>& dout,
                         const std::vector<double>& out, const std::vector<double>& lse,
                         std::vector<double>& gx) {
  ref::attention_backward(gx.data() + p.q_off, gx.data() + p.k_off, gx.data() + p.v_off, dout.data(),
                          out.data(), lse.data(), x.data() + p.q_off, x.data() + p.k_off, x.data() + p.v_off,
                          p.q_pos.data(), p.k_pos.data(), p.d);
}

// |a − b| / (atol + |b|) ≤ rtol elementwise, with atol = 1e-2 · max|b| so that
// elements that cancel to near zero are held to 1e-2·rtol of the scale. −inf
// must match exactly; any NaN fails. Only for double against double (the
// reference against finite differences); the fp32 kernels are held to the
// derived bounds of attention_bounds.h.
template <typename A>
void expect_close(const std::vector<A>& a, const std::vector<double>& b, double rtol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  double scale = 0;
  for (double x : b) {
    if (std::isfinite(x)) scale = std::max(scale, std::abs(x));
  }
  const double atol = std::max(1e-2 * scale, 1e-12);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double ai = static_cast<double>(a[i]);
    if (!std::isfinite(b[i])) {
      ASSERT_EQ(ai, b[i]) << what << " element " << i;
      continue;
    }
    ASSERT_TRUE(std::isfinite(ai)) << what << " element " << i << " is " << ai << ", expected " << b[i];
    worst = std::max(worst, max_scaled_error(&ai, &b[i], 1, atol));
  }
  EXPECT_LE(worst, rtol) << what << " (atol " << atol << ")";
}

}  // namespace mt::attention_test

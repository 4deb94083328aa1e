// Running error bounds of the fp32 optimizers (optim/optimizer.h) against
// their double references, element by element and step by step, first order
// in u (second-order terms, below 1e-12 relative here, are covered by a
// factor 1.01 where the bound is used). The optimizers are elementwise, so no
// host's summation order enters; what the bound counts is each rounding of
// the fp32 arithmetic, including the fp32 roundings of β₁, β₂, the weight
// decay and the momentum (1 − β₁ is exact in fp32 by Sterbenz, so it carries
// β₁'s rounding, |fl(β₁) − β₁| / (1 − β₁) relatively).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "bounds.h"

namespace mt::testing {

// Relative error of rounding x to fp32.
inline double f32_rel(double x) {
  return x == 0 ? 0 : std::abs(double(static_cast<float>(x)) - x) / std::abs(x);
}

// The Adam direction m̂ / (√v̂ + ε) (optim/adamw.h AdamMoments): the exact
// moments in double and the bounds dm, dv of the fp32 moments' errors.
struct AdamDirectionBound {
  double b1, b2, eps;
  std::vector<double> m, v, dm, dv;
  AdamDirectionBound(int64_t n, double beta1, double beta2, double epsilon)
      : b1(beta1), b2(beta2), eps(epsilon), m(n, 0.0), v(n, 0.0), dm(n, 0.0), dv(n, 0.0) {}

  // One step with gradient g at step t: the exact direction of element i and
  // the bound of the fp32 direction's error.
  std::pair<double, double> step(size_t i, float g, int t) {
    const double u = kU32, e1 = f32_rel(b1) * b1 / (1 - b1), e2 = f32_rel(b2) * b2 / (1 - b2);
    const double gd = g, m_old = m[i], v_old = v[i];
    m[i] = b1 * m_old + (1 - b1) * gd;
    v[i] = b2 * v_old + (1 - b2) * gd * gd;
    // b1·m and (1−b1)·g each rounded, with b1's own rounding; the sum rounded.
    dm[i] = b1 * dm[i] + (f32_rel(b1) + u) * b1 * std::abs(m_old) + (e1 + u) * (1 - b1) * std::abs(gd) +
            u * std::abs(m[i]);
    dv[i] = b2 * dv[i] + (f32_rel(b2) + u) * b2 * v_old + (e2 + 2 * u) * (1 - b2) * gd * gd + u * v[i];
    const double c1 = 1 / (1 - std::pow(b1, t)), c2 = 1 / (1 - std::pow(b2, t));
    if (v[i] == 0) return {0.0, 0.0};  // g was 0 every step: m = v = 0, the direction is exactly 0
    const double num = m[i] * c1, sq = std::sqrt(v[i] * c2), den = sq + eps, dir = num / den;
    const double d_num = c1 * dm[i] + 2 * u * std::abs(num);                     // c1's rounding, the product
    const double d_den = sq * (0.5 * dv[i] / v[i] + 2 * u) + u * eps + u * den;  // c2, v·c2, sqrt; ε; the sum
    const double d_dir = d_num / den + std::abs(num) * d_den / (den * den) + u * std::abs(dir);
    return {dir, d_dir};
  }
};

}  // namespace mt::testing

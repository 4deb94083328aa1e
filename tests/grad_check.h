// Test helpers: central finite differences in double precision, and error
// measures. Backward kernels (fp32) are checked against the finite-difference
// gradient of the double-precision reference forward, so the oracle is
// independent of the code under test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <vector>

namespace mt::testing {

// d f / d x_i by central differences, for every i. f is evaluated in double.
// The error is the truncation h²/6·|f‴| plus f's rounding over h, ε·|f|/h
// (bounds.h fd_bound); h = 1e-5 balances the two near 1e-11 for f and f‴ of
// order 1, far below the 1e-7 the reference checks allow.
inline std::vector<double> numeric_grad(const std::function<double(const std::vector<double>&)>& f,
                                        std::vector<double> x, double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double fp = f(x);
    x[i] = saved - h;
    const double fm = f(x);
    x[i] = saved;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// max_i |a_i − b_i| / (atol + |b_i|): ≤ rtol means every element is within
// rtol relative (or atol·rtol absolute near zero). Callers pass atol (a floor
// tied to the data's scale: test_helpers.h rel_error).
template <typename A, typename B>
double max_scaled_error(const A* a, const B* b, int64_t n, double atol = 1e-6) {
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::abs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    worst = std::max(worst, d / (atol + std::abs(static_cast<double>(b[i]))));
  }
  return worst;
}

template <typename T>
std::vector<double> to_double(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}

}  // namespace mt::testing

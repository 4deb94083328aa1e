// Derived error bounds for the tests (docs/MODEL.md "Test bounds"). An fp32
// result is held against a double reference within a bound that follows from
// the arithmetic, not from a spread measured on one host: a dot product or sum
// of K terms computed in fp32, in any order and with or without FMA, is within
// γ_K · Σ|terms| of the exact value (Higham, Accuracy and Stability of
// Numerical Algorithms, §3.1), so no BLAS kernel, vector width or thread count
// can exceed it, while a dropped term or a wrong scale misses by O(|terms|).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace mt::testing {

inline constexpr double kU32 = 0x1p-24;  // unit roundoff of fp32
inline constexpr double kU64 = 0x1p-53;  // unit roundoff of double

// γ_n = n·u / (1 − n·u): the relative bound of n successive roundings.
constexpr double gamma_n(double n, double u = kU32) {
  return n * u / (1.0 - n * u);
}

// Elementwise |x|, for the magnitudes Σ|a_i b_i| a reference run on |inputs| gives.
inline std::vector<double> abs_of(const std::vector<double>& v) {
  std::vector<double> out(v.size());
  for (size_t i = 0; i < v.size(); ++i)
    out[i] = std::abs(v[i]);
  return out;
}

// max_i |got_i − want_i| / bound_i: at most 1 when every element is within its
// bound. With MESHTRAIN_BOUNDS_LOG set, each check prints the ratio, so that
// scripts/unit_legs.sh can report the worst per test and leg.
template <typename A, typename B>
double bound_ratio(const A* got, const B* want, const double* bound, int64_t n) {
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    worst = std::max(worst, d == 0.0 ? 0.0 : d / bound[i]);
    if (std::isnan(d)) worst = INFINITY;
  }
  return worst;
}

inline void log_ratio(double ratio, const char* what) {
  if (std::getenv("MESHTRAIN_BOUNDS_LOG") == nullptr) return;
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("bound-ratio %s.%s %s %.3e\n", info ? info->test_suite_name() : "?", info ? info->name() : "?",
              what, ratio);
}

// Succeeds when every |got_i − want_i| ≤ bound_i; the message names the worst
// element's ratio to its bound.
template <typename A, typename B>
::testing::AssertionResult within_bound(const std::vector<A>& got, const std::vector<B>& want,
                                        const std::vector<double>& bound, const char* what) {
  if (got.size() != want.size() || got.size() != bound.size())
    return ::testing::AssertionFailure()
           << what << ": sizes " << got.size() << ", " << want.size() << ", " << bound.size();
  const double r = bound_ratio(got.data(), want.data(), bound.data(), static_cast<int64_t>(got.size()));
  log_ratio(r, what);
  if (r <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": worst error is " << r << " times its bound";
}

inline ::testing::AssertionResult within_bound(double got, double want, double bound, const char* what) {
  const double d = std::abs(got - want);
  const double r = d == 0.0 ? 0.0 : d / bound;
  log_ratio(r, what);
  if (r <= 1.0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << got << " vs " << want << ", error " << d << " is "
                                       << r << " times its bound " << bound;
}

// Central differences (grad_check.h) of an f evaluated in double with rounding
// error at most df: |fd_i - f'_i| <= trunc + df/h + f'_i's share of the rounded
// step x_i +- h (2 u64 (|x_i| + h)/h relative). trunc is h^2/6 |f'''|, zero
// for an f linear in x.
inline std::vector<double> fd_bound(const std::vector<double>& x, const std::vector<double>& g, double df,
                                    double h = 1e-5, double trunc = 0.0) {
  std::vector<double> b(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    b[i] = trunc + df / h + 2 * kU64 * (std::abs(x[i]) + h) / h * std::abs(g[i]);
  return b;
}

// A layout's bound from the one-process fp32 run's own distance d from a
// double reference (docs/PARALLELISM.md "How the bounds are derived"): the
// layout does the same arithmetic in another order, so its distance is of d's
// size; 10 · max(d, K·u) allows it 9 times as large, and the floor K·u (one
// sum of K terms) keeps a run that rounds close to exact from setting it.
inline double layout_tol(double d_one_process, int64_t K) {
  return 10.0 * std::max(d_one_process, static_cast<double>(K) * kU32);
}

// err < tol for a normwise error and its bound, logged as err / tol.
inline ::testing::AssertionResult below(double err, double tol, const char* what) {
  log_ratio(err / tol, what);
  if (err < tol) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << err << " is " << err / tol << " times its bound " << tol;
}

}  // namespace mt::testing

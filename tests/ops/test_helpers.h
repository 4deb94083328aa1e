// Shared helpers of the ops tests: seeded random inputs, a relative error with
// a floor tied to the scale of the expected values, and a thread-count scope.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "grad_check.h"

namespace mt::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v)
    x = dist(gen);
  return v;
}

inline std::vector<double> random_doubles(size_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v)
    x = dist(gen);
  return v;
}

inline std::vector<int32_t> random_ints(size_t n, uint32_t seed, int32_t lo, int32_t hi_inclusive) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi_inclusive);
  std::vector<int32_t> v(n);
  for (int32_t& x : v)
    x = dist(gen);
  return v;
}

// max_i |a_i − b_i| / (floor + |b_i|) with floor = floor_frac · max_i |b_i|:
// a relative error, except that elements much smaller than the largest are
// compared absolutely (fp32 cannot resolve them better than that).
template <typename A, typename B>
double rel_error(const std::vector<A>& a, const std::vector<B>& b, double floor_frac = 1e-2) {
  if (a.size() != b.size()) return INFINITY;
  double scale = 0.0;
  for (const B& x : b)
    scale = std::max(scale, std::abs(static_cast<double>(x)));
  const double floor = std::max(floor_frac * scale, 1e-300);
  return max_scaled_error(a.data(), b.data(), static_cast<int64_t>(a.size()), floor);
}

// Σ_i r_i · y_i: a random scalar projection of an output, so that one gradient
// checks the whole Jacobian.
inline double project(const std::vector<double>& r, const std::vector<double>& y) {
  double s = 0.0;
  for (size_t i = 0; i < y.size(); ++i)
    s += r[i] * y[i];
  return s;
}

// Sets the OpenMP thread count for the scope, restoring it afterwards.
class ThreadScope {
 public:
  explicit ThreadScope(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadScope() { omp_set_num_threads(saved_); }
  ThreadScope(const ThreadScope&) = delete;
  ThreadScope& operator=(const ThreadScope&) = delete;

 private:
  int saved_;
};

}  // namespace mt::testing

// Helpers of the CUDA kernel tests: random inputs, NaN-poisoned outputs, the
// relative L2 error against a double reference, and a report line per checked
// tensor (appended to $MT_CUDA_REPORT when set; scripts/gpu_check.sh tabulates it).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cuda/runtime.h"

namespace mt::testing {

// fp32 kernels against the double references: 1e-5 relative L2 per tensor.
inline constexpr double kFp32Tol = 1e-5;

inline std::vector<float> uniform(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v)
    x = dist(gen);
  return v;
}

inline std::vector<int32_t> ints(size_t n, uint32_t seed, int32_t lo, int32_t hi_inclusive) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(lo, hi_inclusive);
  std::vector<int32_t> v(n);
  for (int32_t& x : v)
    x = dist(gen);
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) {
  return {v.begin(), v.end()};
}

// A device array whose every element is NaN: an element a kernel fails to
// write then shows up as NaN in the comparison.
inline cuda::Array<float> poisoned(int64_t n) {
  cuda::Array<float> a(n);
  a.upload(std::vector<float>(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN()));
  return a;
}

// ‖got − ref‖₂ / ‖ref‖₂, or +inf if got has a NaN where ref has none (an unwritten
// element) or the sizes differ. ±inf in ref must be matched exactly and is
// left out of the norms (lse of a query that sees no key).
inline double rel_l2(const std::vector<float>& got, const std::vector<double>& ref) {
  if (got.size() != ref.size()) return INFINITY;
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(ref[i])) {
      if (static_cast<double>(got[i]) != ref[i]) return INFINITY;
      continue;
    }
    if (std::isnan(got[i]) != std::isnan(ref[i])) return INFINITY;
    const double e = static_cast<double>(got[i]) - ref[i];
    num += e * e;
    den += ref[i] * ref[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

inline void report(const std::string& kernel, const std::string& tensor, double err, double tol) {
  const char* path = std::getenv("MT_CUDA_REPORT");
  if (path == nullptr) return;
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "%s %s %.3e %.1e %s\n", kernel.c_str(), tensor.c_str(), err, tol,
                 err <= tol ? "pass" : "FAIL");
    std::fclose(f);
  }
}

// Checks one output tensor of `kernel` and records the line.
inline void expect_close(const std::string& kernel, const std::string& tensor, const std::vector<float>& got,
                         const std::vector<double>& ref, double tol = kFp32Tol) {
  const double err = rel_l2(got, ref);
  report(kernel, tensor, err, tol);
  EXPECT_LE(err, tol) << kernel << " " << tensor << ": relative L2 error " << err << " > " << tol;
}

}  // namespace mt::testing

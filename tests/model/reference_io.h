// The test side of the float64 PyTorch cross-checks (tests/python/*_reference.py):
// reading the reference's raw float64 outputs and comparing against them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

namespace mt::testing_ref {

// A file of native float64 values, whole.
inline std::vector<double> read_f64(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary | std::ios::ate);
  const auto n = static_cast<size_t>(f.tellg()) / sizeof(double);
  std::vector<double> v(n);
  f.seekg(0);
  f.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(n * sizeof(double)));
  return v;
}

// ‖a − b‖ / ‖b‖ over n elements.
inline double rel_l2(const float* a, const double* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace mt::testing_ref

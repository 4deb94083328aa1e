// The test side of the float64 PyTorch cross-checks (tests/python/*_reference.py):
// running a reference on a batch, reading its raw float64 outputs and comparing
// against them.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace mt::testing_ref {

// Runs tests/python/SCRIPT on the model directory DIR/model (saved by the
// caller) and the batch, written as DIR/tokens.i32 (int32 inputs [B, T], then
// targets): outputs in DIR/out; `mode` is its last argument where given ("bf16").
// Returns std::system's status (exit 3: no torch).
inline int run_reference(const char* python_dir, const char* script, const std::filesystem::path& dir,
                         const std::vector<int32_t>& inputs, const std::vector<int32_t>& targets, int64_t B,
                         int64_t T, const std::string& mode = "") {
  {
    std::ofstream f(dir / "tokens.i32", std::ios::binary);
    f.write(reinterpret_cast<const char*>(inputs.data()), static_cast<std::streamsize>(inputs.size() * 4));
    f.write(reinterpret_cast<const char*>(targets.data()), static_cast<std::streamsize>(targets.size() * 4));
  }
  const std::string cmd = "/usr/bin/python3 " + std::string(python_dir) + "/" + script + " " +
                          (dir / "model").string() + " " + (dir / "tokens.i32").string() + " " +
                          std::to_string(B) + " " + std::to_string(T) + " " + (dir / "out").string() +
                          (mode.empty() ? "" : " " + mode);
  return std::system(cmd.c_str());
}

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
template <typename A>
double rel_l2(const A* a, const double* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-300));
}

}  // namespace mt::testing_ref

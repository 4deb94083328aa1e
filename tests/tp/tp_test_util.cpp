#include "tp_test_util.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "bounds.h"
#include "comm/mpi_test.h"

namespace mt::test {

std::vector<float> random_vec(int64_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::vector<float> v(static_cast<size_t>(n));
  // Built from the raw 32-bit draws: std::uniform_real_distribution is not
  // specified bit for bit, the draws are.
  for (float& x : v)
    x = scale * (static_cast<float>(gen() >> 8) / 8388608.0f - 1.0f);
  return v;
}

std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

double rel_err(const std::vector<float>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / scale;
}

double dot_tol(int64_t K, const std::vector<double>& want, double prior) {
  double scale = 1e-30;
  for (double x : want)
    scale = std::max(scale, std::abs(x));
  return testing::gamma_n(static_cast<double>(K + 1)) * (static_cast<double>(K) + prior) / scale;
}

DeviceMesh tp_mesh(int tp) {
  return DeviceMesh(world(), MeshSizes{.dp = world().size() / tp, .tp = tp});
}

std::vector<LedgerEntry> entries_since(const Group& g, size_t mark, const std::string& axis) {
  const auto& all = g.context().ledger.entries();
  std::vector<LedgerEntry> out;
  for (size_t i = mark; i < all.size(); ++i)
    if (all[i].axis == axis) out.push_back(all[i]);
  return out;
}

}  // namespace mt::test

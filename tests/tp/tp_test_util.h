// Helpers of the tensor-parallel tests: the same pseudo-random tensors on every
// rank, slices of full (double) results worked out here independently of the
// plan helpers, comparison, the tp ledger since a mark.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "bounds.h"
#include "comm/context.h"
#include "comm/group.h"
#include "mesh/mesh.h"

namespace mt::test {

// n values uniform in [-scale, scale), a pure function of (seed, n): equal on every rank.
std::vector<float> random_vec(int64_t n, uint32_t seed, float scale = 1.0f);
std::vector<double> to_double(const std::vector<float>& v);

// max_i |a[i] − b[i]| / max(max_i |b[i]|, 1e-30): the error relative to the tensor's scale.
double rel_err(const std::vector<float>& a, const std::vector<double>& b);

// The derived bound of rel_err(a, want) when each element of a is an fp32 sum
// of K products of random_vec factors (|x| ≤ 1) plus a prior of magnitude at
// most `prior`: |error| ≤ γ_{K+1} · (K + prior) in any order of summation, so
// on any host and any split over ranks (tests/bounds.h); over want's scale.
double dot_tol(int64_t K, const std::vector<double>& want, double prior = 0.0);

// Rows [r0, r0 + nr) and columns [c0, c0 + nc) of a row-major [rows, cols] matrix.
template <typename T>
std::vector<T> block(const std::vector<T>& m, int64_t cols, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
  std::vector<T> out;
  out.reserve(static_cast<size_t>(nr * nc));
  for (int64_t r = r0; r < r0 + nr; ++r)
    for (int64_t c = c0; c < c0 + nc; ++c)
      out.push_back(m[static_cast<size_t>(r * cols + c)]);
  return out;
}

// Caller-owned scratch for the tp layers (parallel/tensor_parallel.h), large
// enough for every test's [N, C] partial sums.
inline float* scratch() {
  static std::vector<float> s(1 << 20);
  return s.data();
}

// A mesh of the world with the given tp (dp = world / tp).
DeviceMesh tp_mesh(int tp);

// The ledger entries of `axis` recorded after `mark` (an index into the ledger).
std::vector<LedgerEntry> entries_since(const Group& g, size_t mark, const std::string& axis);
inline size_t ledger_mark(const Group& g) {
  return g.context().ledger.entries().size();
}

}  // namespace mt::test

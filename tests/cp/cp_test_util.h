// Helpers of the context-parallel tests: the same pseudo-random tensors on
// every rank, a cp group carved from the world by a real mesh (dp × cp), the
// whole-sequence attention in double (ops/attention_reference.h) as the oracle,
// and the comm ledger since a mark.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "bounds.h"
#include "comm/context.h"
#include "comm/group.h"
#include "comm/mpi_test.h"
#include "mesh/mesh.h"
#include "ops/attention.h"
#include "parallel/context_parallel.h"

namespace mt::test {

// n values uniform in [-scale, scale), a pure function of (seed, n): equal on every rank.
inline std::vector<float> random_vec(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v)
    x = scale * (static_cast<float>(gen() >> 8) / 8388608.0f - 1.0f);
  return v;
}

// max_i |a[i] − b[i]| / max(max_i |b[i]|, 1e-30).
inline double rel_err(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double err = 0, scale = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return err / scale;
}

// The world as a (dp = world / cp) × cp mesh; every rank joins the split.
inline DeviceMesh cp_mesh(int cp) {
  return DeviceMesh(world(), MeshSizes{.dp = world().size() / cp, .cp = cp});
}

inline size_t ledger_mark(const Group& g) {
  return g.context().ledger.entries().size();
}

// Ledger entries of `axis` recorded after `mark`.
inline std::vector<LedgerEntry> entries_since(const Group& g, size_t mark, const std::string& axis) {
  const auto& all = g.context().ledger.entries();
  std::vector<LedgerEntry> out;
  for (size_t i = mark; i < all.size(); ++i)
    if (all[i].axis == axis) out.push_back(all[i]);
  return out;
}

// The inputs of one attention call on this rank of `g` (random q|k|v fused
// with stride d.q_stride, dout; zigzag positions) and room for its outputs
// and zeroed input gradients: what the buffer tests run a call on.
struct CallBuffers {
  std::vector<float> x, dout, out, lse, dx;
  std::vector<int32_t> pos;
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  CallBuffers(const AttentionDims& d, const Group& g, uint32_t seed)
      : x(random_vec(d.batch * d.q_len * d.q_stride, seed)),
        dout(random_vec(d.batch * d.q_len * d.out_stride, seed + 1)),
        out(static_cast<size_t>(d.batch * d.q_len * d.out_stride)),
        lse(static_cast<size_t>(d.batch * d.q_len * d.n_heads)),
        dx(static_cast<size_t>(d.batch * d.q_len * d.q_stride), 0.0f),
        pos(static_cast<size_t>(d.batch * d.q_len)) {
    for (int64_t b = 0; b < d.batch; ++b)
      cp::zigzag_positions(pos.data() + b * d.q_len, d.q_len * g.size(), g.size(), g.rank());
    q = x.data();
    k = q + d.n_heads * d.head_dim;
    v = k + d.n_kv_heads * d.head_dim;
  }
  float* dq() { return dx.data(); }
  float* dk() { return dx.data() + (k - q); }
  float* dv() { return dx.data() + (v - q); }
};

}  // namespace mt::test

#include "ops/embedding.h"

#include <algorithm>

#include "ops/cpu_kernels.h"

namespace mt {

void cpu::embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* row = table + static_cast<int64_t>(ids[n]) * C;
    float* o = out + n * C;
    for (int64_t c = 0; c < C; ++c)
      o[c] = row[c];
  }
}

void cpu::embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C) {
  // Threads own disjoint channel blocks and walk the tokens in order, so a row
  // hit by several tokens receives their gradients in token order whatever the
  // thread count: no atomics, bitwise reproducible. 64 floats = 4 cache lines.
  constexpr int64_t kBlock = 64;
  const int64_t n_blocks = (C + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int64_t c0 = b * kBlock;
    const int64_t c1 = std::min(C, c0 + kBlock);
    for (int64_t n = 0; n < N; ++n) {
      float* d = dtable + static_cast<int64_t>(ids[n]) * C;
      const float* g = dout + n * C;
      for (int64_t c = c0; c < c1; ++c)
        d[c] += g[c];
    }
  }
}

}  // namespace mt

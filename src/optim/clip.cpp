#include "optim/clip.h"

#include <algorithm>
#include <vector>

namespace mt {

double sum_squares(const float* g, int64_t n) {
  constexpr int64_t kChunk = 4096;
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
  std::vector<double> partial(static_cast<size_t>(n_chunks));
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kChunk);
    double s = 0.0;
    for (int64_t i = c * kChunk; i < end; ++i)
      s += static_cast<double>(g[i]) * g[i];
    partial[static_cast<size_t>(c)] = s;
  }
  double total = 0.0;
  for (double s : partial)
    total += s;
  return total;
}

double clip_by_norm(float* g, int64_t n, double norm, double max_norm) {
  if (max_norm <= 0.0 || norm <= max_norm) return 1.0;
  const double scale = max_norm / (norm + 1e-6);
  const float s = static_cast<float>(scale);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    g[i] *= s;
  return scale;
}

}  // namespace mt

#include "optim/clip.h"

#include <algorithm>
#include <vector>

namespace mt {

namespace {

constexpr int64_t kChunk = 4096;

// Σ g² of one chunk, in element order.
double chunk_sum_squares(const float* g, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i)
    s += static_cast<double>(g[i]) * g[i];
  return s;
}

constexpr int64_t kLanes = 8;  // chunks summed side by side

// The sums of kLanes whole chunks starting at g, each in element order as
// chunk_sum_squares sums it, so the bits are the same: the chunks' chains of
// dependent double adds interleave instead of running one after the other.
void lane_sum_squares(const float* g, double* out) {
  double acc[kLanes] = {};
  for (int64_t i = 0; i < kChunk; ++i) {
    for (int64_t j = 0; j < kLanes; ++j) {
      const double x = g[j * kChunk + i];
      acc[j] += x * x;
    }
  }
  for (int64_t j = 0; j < kLanes; ++j)
    out[j] = acc[j];
}

}  // namespace

double sum_squares(const float* g, int64_t n) {
  // Chunk c's sum is over [c·kChunk, min(n, (c+1)·kChunk)) in element order,
  // and the chunk sums are added in chunk order: the bits depend on neither
  // the thread count nor on how many chunks are summed side by side.
  const int64_t n_chunks = (n + kChunk - 1) / kChunk;
  const int64_t n_groups = n / (kChunk * kLanes);  // groups of kLanes whole chunks
  std::vector<double> partial(static_cast<size_t>(n_chunks));
#pragma omp parallel
  {
#pragma omp for schedule(static) nowait
    for (int64_t grp = 0; grp < n_groups; ++grp)
      lane_sum_squares(g + grp * kLanes * kChunk, partial.data() + grp * kLanes);
#pragma omp for schedule(static)
    for (int64_t c = n_groups * kLanes; c < n_chunks; ++c) {
      const int64_t end = std::min(n, (c + 1) * kChunk);
      partial[static_cast<size_t>(c)] = chunk_sum_squares(g + c * kChunk, end - c * kChunk);
    }
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

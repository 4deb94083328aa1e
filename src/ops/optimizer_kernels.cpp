#include "ops/optimizer_kernels.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu_kernels.h"

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

void cpu::adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr,
                       double beta1, double beta2, double eps, double weight_decay, int64_t t) {
  const AdamMoments adam(beta1, beta2, eps, t);
  const float lr_f = static_cast<float>(lr);
  const float decay = static_cast<float>(lr * weight_decay);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const float update = adam.direction(grads[i], m[i], v[i]);
    params[i] = params[i] - decay * params[i] - lr_f * update;
  }
}

void cpu::sgd_update(float* params, const float* grads, float* buf, int64_t n, double lr, double momentum,
                     bool nesterov, double weight_decay) {
  const float lr_f = static_cast<float>(lr), mu = static_cast<float>(momentum);
  const float wd = static_cast<float>(weight_decay);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float d = grads[i] + wd * params[i];
    if (buf != nullptr) {
      // b starts at 0, so the first step's b = d, as PyTorch's clone of d.
      const float b = mu * buf[i] + d;
      buf[i] = b;
      d = nesterov ? d + mu * b : b;
    }
    params[i] -= lr_f * d;
  }
}

void cpu::lamb_direction(const float* params, float* grads, float* m, float* v, int64_t n, double beta1,
                         double beta2, double eps, double weight_decay, int64_t t) {
  const AdamMoments adam(beta1, beta2, eps, t);
  const float wd = static_cast<float>(weight_decay);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    grads[i] = adam.direction(grads[i], m[i], v[i]) + wd * params[i];
}

void cpu::exact_sum_squares(ExactSum* acc, const float* g, int64_t n) {
  // Each thread sums a range into its own accumulator; the merge is exact, so
  // neither the thread count nor the cut changes the total.
  constexpr int64_t kPerThread = int64_t{1} << 18;
  if (n < 2 * kPerThread) {
    acc->add_squares(g, n);
    return;
  }
  std::vector<ExactSum> parts(static_cast<size_t>(omp_get_max_threads()));
#pragma omp parallel
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t begin = n * t / nt, end = n * (t + 1) / nt;
    parts[static_cast<size_t>(t)].add_squares(g + begin, end - begin);
  }
  for (const ExactSum& p : parts)
    acc->merge(p);
}

double cpu::sum_squares(const float* g, int64_t n) {
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

}  // namespace mt

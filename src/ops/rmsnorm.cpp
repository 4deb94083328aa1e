#include "ops/rmsnorm.h"

#include <algorithm>
#include <cmath>

#include "ops/cpu_kernels.h"

namespace mt {

void cpu::rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                          int64_t C, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float* y = out + n * C;
    // Sum of squares in double: exact enough that the fp32 result is the
    // correctly rounded rstd for any practical C.
    double ss = 0.0;
#pragma omp simd reduction(+ : ss)
    for (int64_t c = 0; c < C; ++c)
      ss += static_cast<double>(x[c]) * x[c];
    const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(C) + eps));
    rstd[n] = r;
    // Hugging Face order: (x · rstd) · weight, each rounded to fp32.
    for (int64_t c = 0; c < C; ++c)
      y[c] = (x[c] * r) * weight[c];
  }
}

void cpu::rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int64_t N, int64_t C) {
  // With x̂ = x · r and y = x̂ · w:
  //   dx = r · (w ⊙ dy) − r³ / C · x · Σ_c (w ⊙ dy ⊙ x)
  //   dw = Σ_n dy ⊙ x̂
  constexpr int64_t kRowChunk = 64;  // rows summed together before the running total
  constexpr int64_t kColBlock = 64;  // channels per task in the dweight pass
  const int64_t n_col_blocks = (C + kColBlock - 1) / kColBlock;
#pragma omp parallel
  {
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;
      const float* dy = dout + n * C;
      float* dx = dinp + n * C;
      const float r = rstd[n];
      double dot = 0.0;
#pragma omp simd reduction(+ : dot)
      for (int64_t c = 0; c < C; ++c)
        dot += static_cast<double>(weight[c] * dy[c]) * x[c];
      const float k = static_cast<float>(static_cast<double>(r) * r * r * dot / static_cast<double>(C));
      for (int64_t c = 0; c < C; ++c)
        dx[c] = r * (weight[c] * dy[c]) - k * x[c];
    }

    if (dweight != nullptr) {  // a frozen weight needs no gradient
                               // dweight: each task owns a block of channels and sums the rows in a fixed
                               // order (chunks of kRowChunk rows in fp32, chunk partials in double), so
                               // the result does not depend on the number of threads.
#pragma omp for schedule(static)
      for (int64_t b = 0; b < n_col_blocks; ++b) {
        const int64_t c0 = b * kColBlock;
        const int64_t width = std::min(C, c0 + kColBlock) - c0;
        double total[kColBlock] = {};
        for (int64_t n0 = 0; n0 < N; n0 += kRowChunk) {
          const int64_t n1 = std::min(N, n0 + kRowChunk);
          float part[kColBlock] = {};
          for (int64_t n = n0; n < n1; ++n) {
            const float r = rstd[n];
            const float* x = inp + n * C + c0;
            const float* dy = dout + n * C + c0;
            for (int64_t j = 0; j < width; ++j)
              part[j] += dy[j] * (x[j] * r);
          }
          for (int64_t j = 0; j < width; ++j)
            total[j] += part[j];
        }
        for (int64_t j = 0; j < width; ++j)
          dweight[c0 + j] += static_cast<float>(total[j]);
      }
    }
  }
}

}  // namespace mt

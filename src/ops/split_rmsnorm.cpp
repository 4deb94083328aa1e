#include "ops/split_rmsnorm.h"

#include <cmath>

#include "ops/cpu_kernels.h"
#include "ops/kernels.h"

namespace mt {

void cpu::split_rmsnorm_sum_squares(double* ss, const float* inp, int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    ss[n] = 0.0;
    for (int64_t c = 0; c < C; ++c)
      ss[n] += static_cast<double>(x[c]) * x[c];
  }
}

void cpu::split_rmsnorm_scale(float* out, float* rstd, const float* inp, const float* w, const double* ss,
                              int64_t N, int64_t C, int64_t d, float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float r = static_cast<float>(1.0 / std::sqrt(ss[n] / static_cast<double>(d) + eps));
    rstd[n] = r;
    for (int64_t c = 0; c < C; ++c)
      out[n * C + c] = (inp[n * C + c] * r) * w[c];
  }
}

void cpu::split_rmsnorm_dot(double* dot, const float* dout, const float* inp, const float* w, int64_t N,
                            int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    dot[n] = 0.0;
    for (int64_t c = 0; c < C; ++c)
      dot[n] += static_cast<double>(w[c] * dout[n * C + c]) * inp[n * C + c];
  }
}

void cpu::split_rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                                 const float* rstd, const double* dot, int64_t N, int64_t C, int64_t d) {
  for (int64_t n = 0; n < N; ++n) {
    const float r = rstd[n];
    const float k = static_cast<float>(static_cast<double>(r) * r * r * dot[n] / static_cast<double>(d));
    for (int64_t c = 0; c < C; ++c)
      dinp[n * C + c] = r * (w[c] * dout[n * C + c]) - k * inp[n * C + c];
  }
  if (dw == nullptr) return;
  for (int64_t c = 0; c < C; ++c) {
    double s = 0.0;
    for (int64_t n = 0; n < N; ++n)
      s += static_cast<double>(dout[n * C + c]) * (inp[n * C + c] * rstd[n]);
    dw[c] += static_cast<float>(s);
  }
}

void split_rmsnorm_sum_squares(double* ss, const float* inp, int64_t N, int64_t C) {
  kernels().split_rmsnorm_sum_squares(ss, inp, N, C);
}
void split_rmsnorm_scale(float* out, float* rstd, const float* inp, const float* w, const double* ss,
                         int64_t N, int64_t C, int64_t d, float eps) {
  kernels().split_rmsnorm_scale(out, rstd, inp, w, ss, N, C, d, eps);
}
void split_rmsnorm_dot(double* dot, const float* dout, const float* inp, const float* w, int64_t N,
                       int64_t C) {
  kernels().split_rmsnorm_dot(dot, dout, inp, w, N, C);
}
void split_rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            const float* rstd, const double* dot, int64_t N, int64_t C, int64_t d) {
  kernels().split_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, dot, N, C, d);
}

}  // namespace mt

// The local kernels of an RMSNorm whose features are split over ranks
// (parallel/tp2d_linear.h rmsnorm2d runs them around its all-reduces): a rank
// holds C of the row's d features; the row sums go to the host's collective
// as doubles on the run's device.
#pragma once

#include <cstdint>

namespace mt {

// ss[n] = Σ over the held features of x[n, c]², in feature order.
void split_rmsnorm_sum_squares(double* ss, const float* inp, int64_t N, int64_t C);
// rstd[n] = 1 / sqrt(ss[n] / d + eps) (ss summed over every rank), out = inp · rstd · w.
void split_rmsnorm_scale(float* out, float* rstd, const float* inp, const float* w, const double* ss,
                         int64_t N, int64_t C, int64_t d, float eps);
// dot[n] = Σ over the held features of (w ⊙ dout ⊙ inp)[n, c].
void split_rmsnorm_dot(double* dot, const float* dout, const float* inp, const float* w, int64_t N,
                       int64_t C);
// dinp = rstd · (w ⊙ dout) − rstd³ / d · inp · dot (dot summed over every rank);
// dw += Σ over rows of dout ⊙ inp · rstd when dw is not null.
void split_rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            const float* rstd, const double* dot, int64_t N, int64_t C, int64_t d);

}  // namespace mt

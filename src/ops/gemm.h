// Matrix products. cblas_sgemm is the only BLAS entry point in meshtrain; it is
// called from here and nowhere else.
#pragma once

#include <cstdint>

namespace mt {

enum class Trans { no, yes };
enum class Out { assign, add };  // write the result, or add it to what is there

// Row-major C[M, N] = op(A)[M, K] · op(B)[K, N] (+ C when out == Out::add).
// lda, ldb, ldc are the row strides (in floats) of A, B, C as stored.
void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float* C, int64_t ldc, Out out);

// Bias-free linear layer with PyTorch's weight layout [out_features, in_features]:
//   out[N, OC] = inp[N, IC] · weight[OC, IC]ᵀ        (added to out when mode == Out::add)
void linear_forward(float* out, const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC,
                    Out mode = Out::assign);

// Backward of linear_forward:
//   dinp[N, IC]     = dout[N, OC] · weight        (assigned; skipped when dinp is null)
//   dweight[OC, IC] += dout[N, OC]ᵀ · inp         (accumulated; skipped when dweight is null)
void linear_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                     int64_t N, int64_t IC, int64_t OC);

}  // namespace mt

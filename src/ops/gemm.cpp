#include "ops/gemm.h"

#include <cblas.h>

#include "core/error.h"

namespace mt {

void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float* C, int64_t ldc, Out out) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    // An empty sum: BLAS would reject lda = 0 and leave C untouched, but the
    // contract says C = 0 (assign) or C unchanged (add).
    if (out == Out::assign) {
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j)
          C[i * ldc + j] = 0.0f;
      }
    }
    return;
  }
  const float beta = out == Out::add ? 1.0f : 0.0f;
  cblas_sgemm(CblasRowMajor, trans_a == Trans::yes ? CblasTrans : CblasNoTrans,
              trans_b == Trans::yes ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), 1.0f, A, static_cast<blasint>(lda), B,
              static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

void linear_forward(float* out, const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC,
                    Out mode) {
  // out[N, OC] = inp[N, IC] · weight[OC, IC]ᵀ
  sgemm(Trans::no, Trans::yes, N, OC, IC, inp, IC, weight, IC, out, OC, mode);
}

void linear_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                     int64_t N, int64_t IC, int64_t OC) {
  if (dinp != nullptr) {
    // dinp[N, IC] = dout[N, OC] · weight[OC, IC]
    sgemm(Trans::no, Trans::no, N, IC, OC, dout, OC, weight, IC, dinp, IC, Out::assign);
  }
  if (dweight != nullptr) {
    // dweight[OC, IC] += dout[N, OC]ᵀ · inp[N, IC]
    sgemm(Trans::yes, Trans::no, OC, IC, N, dout, OC, inp, IC, dweight, IC, Out::add);
  }
}

}  // namespace mt

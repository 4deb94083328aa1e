#include <climits>

#include "cuda/check.h"
#include "cuda/gemm.h"

namespace mt::cuda {
namespace {

cublasHandle_t get(Blas& b) {
  return static_cast<cublasHandle_t>(b.handle());
}

cublasOperation_t op(Trans t) {
  return t == Trans::yes ? CUBLAS_OP_T : CUBLAS_OP_N;
}

int to_int(int64_t v, const char* what) {
  MT_CHECK(v >= 0 && v <= INT_MAX, what, " = ", v, " does not fit cuBLAS's 32-bit sizes");
  return static_cast<int>(v);
}

// Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: the same
// buffers read as their transposes, so swap the operands and M with N.
void gemm_ex(Blas& blas, Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const void* A, int64_t lda,
             const void* B, int64_t ldb, cudaDataType_t in_type, float* C, int64_t ldc, Out out,
             cublasComputeType_t compute) {
  if (M == 0 || N == 0) return;
  const float alpha = 1.0f;
  const float beta = out == Out::add ? 1.0f : 0.0f;
  MT_CUBLAS_CHECK(cublasGemmEx(get(blas), op(tb), op(ta), to_int(N, "N"), to_int(M, "M"), to_int(K, "K"),
                               &alpha, B, in_type, to_int(ldb, "ldb"), A, in_type, to_int(lda, "lda"), &beta,
                               C, CUDA_R_32F, to_int(ldc, "ldc"), compute, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

Blas::Blas() {
  cublasHandle_t h = nullptr;
  MT_CUBLAS_CHECK(cublasCreate(&h));
  handle_ = h;
  // Default math: no TF32 unless a call asks for it through its compute type.
  MT_CUBLAS_CHECK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
  MT_CUBLAS_CHECK(cublasSetAtomicsMode(h, CUBLAS_ATOMICS_NOT_ALLOWED));
}

Blas::~Blas() {
  (void)cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

void sgemm(Blas& blas, Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A,
           int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, Out out, GemmMath math) {
  gemm_ex(blas, trans_a, trans_b, M, N, K, A, lda, B, ldb, CUDA_R_32F, C, ldc, out,
          math == GemmMath::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F);
}

void gemm_bf16(Blas& blas, Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const bf16* A,
               int64_t lda, const bf16* B, int64_t ldb, float* C, int64_t ldc, Out out) {
  gemm_ex(blas, trans_a, trans_b, M, N, K, A, lda, B, ldb, CUDA_R_16BF, C, ldc, out, CUBLAS_COMPUTE_32F);
}

void linear_forward(Blas& blas, float* out, const float* inp, const float* weight, int64_t N, int64_t IC,
                    int64_t OC, Out mode) {
  sgemm(blas, Trans::no, Trans::yes, N, OC, IC, inp, IC, weight, IC, out, OC, mode);
}

void linear_backward(Blas& blas, float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IC, int64_t OC) {
  if (dinp != nullptr)
    sgemm(blas, Trans::no, Trans::no, N, IC, OC, dout, OC, weight, IC, dinp, IC, Out::assign);
  if (dweight != nullptr) {
    sgemm(blas, Trans::yes, Trans::no, OC, IC, N, dout, OC, inp, IC, dweight, IC, Out::add);
  }
}

}  // namespace mt::cuda

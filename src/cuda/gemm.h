// Matrix products on the GPU through cuBLAS, with the row-major grammar of
// ops/gemm.h (Trans, Out, leading dimensions in elements). All pointers are
// device pointers.
//
// Precision: GemmMath::fp32 is true fp32 (TF32 off: CUBLAS_COMPUTE_32F with the
// default math mode), which the 1e-5 parity with the CPU needs; GemmMath::tf32
// lets the tensor cores round the inputs to TF32 (benchmarks only). gemm_bf16
// multiplies bf16 inputs with fp32 accumulation into an fp32 C: the mixed
// precision rule (bf16 matmul inputs, fp32 everything else).
//
// Reruns are bitwise: cuBLAS gives the same bits for the same call on the same
// GPU model and library version (its atomics mode stays at the default, off).
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "ops/gemm.h"

namespace mt::cuda {

enum class GemmMath { fp32, tf32 };

// A cuBLAS handle on the current device, bound to the default stream.
class Blas {
 public:
  Blas();
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  void* handle() const { return handle_; }

 private:
  void* handle_ = nullptr;  // cublasHandle_t
};

// Row-major C[M, N] = op(A)[M, K] · op(B)[K, N] (+ C when out == Out::add).
void sgemm(Blas& blas, Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A,
           int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, Out out,
           GemmMath math = GemmMath::fp32);

// The same with bf16 A and B, fp32 accumulation and fp32 C.
void gemm_bf16(Blas& blas, Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const bf16* A,
               int64_t lda, const bf16* B, int64_t ldb, float* C, int64_t ldc, Out out);

// ops/gemm.h's linear layer (weight [OC, IC]) in fp32:
//   out[N, OC] = inp[N, IC] · weightᵀ (assigned, or added with Out::add)
void linear_forward(Blas& blas, float* out, const float* inp, const float* weight, int64_t N, int64_t IC,
                    int64_t OC, Out mode = Out::assign);
//   dinp = dout · weight (assigned; skipped when null), dweight += doutᵀ · inp (skipped when null)
void linear_backward(Blas& blas, float* dinp, float* dweight, const float* dout, const float* inp,
                     const float* weight, int64_t N, int64_t IC, int64_t OC);

}  // namespace mt::cuda

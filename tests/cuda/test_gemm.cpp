// cuBLAS GEMMs: fp32 (TF32 off) in every transpose combination with padded
// leading dimensions and both output modes, the linear layer's forward and
// backward, and bf16 inputs with fp32 accumulation.
#include <gtest/gtest.h>

#include "core/bf16.h"
#include "cuda/gemm.h"
#include "cuda/ops.h"
#include "cuda_test_util.h"
#include "ops/reference.h"

namespace mt::testing {
namespace {

using cuda::Array;

// Row-major C = op(A)·op(B) (+ C0) in double; A stored [M, K] or [K, M] with row stride lda.
std::vector<double> gemm_ref(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K,
                             const std::vector<double>& A, int64_t lda, const std::vector<double>& B,
                             int64_t ldb, const std::vector<double>& C0, int64_t ldc, Out out) {
  std::vector<double> C = C0;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0.0;
      for (int64_t p = 0; p < K; ++p) {
        const double a = ta == Trans::no ? A[i * lda + p] : A[p * lda + i];
        const double b = tb == Trans::no ? B[p * ldb + j] : B[j * ldb + p];
        s += a * b;
      }
      C[i * ldc + j] = (out == Out::add ? C0[i * ldc + j] : 0.0) + s;
    }
  return C;
}

TEST(CudaGemm, Fp32AllTransposesAndModes) {
  cuda::Blas blas;
  const int64_t M = 67, N = 45, K = 131;
  for (Trans ta : {Trans::no, Trans::yes})
    for (Trans tb : {Trans::no, Trans::yes})
      for (Out out : {Out::assign, Out::add}) {
        const int64_t lda = (ta == Trans::no ? K : M) + 3, ldb = (tb == Trans::no ? N : K) + 5, ldc = N + 2;
        const int64_t rows_a = ta == Trans::no ? M : K, rows_b = tb == Trans::no ? K : N;
        const auto A = uniform(rows_a * lda, 41), B = uniform(rows_b * ldb, 42), C0 = uniform(M * ldc, 43);
        Array<float> dA(A), dB(B), dC(C0);
        cuda::sgemm(blas, ta, tb, M, N, K, dA.data(), lda, dB.data(), ldb, dC.data(), ldc, out);
        const auto ref =
            gemm_ref(ta, tb, M, N, K, to_double(A), lda, to_double(B), ldb, to_double(C0), ldc, out);
        const std::string name = std::string(ta == Trans::yes ? "T" : "N") + (tb == Trans::yes ? "T" : "N") +
                                 (out == Out::add ? "_add" : "_assign");
        expect_close("gemm_fp32", name, dC.download(), ref);
      }
}

TEST(CudaGemm, LinearForwardBackward) {
  cuda::Blas blas;
  const int64_t N = 57, IC = 83, OC = 109;
  const auto x = uniform(N * IC, 44), w = uniform(OC * IC, 45), dy = uniform(N * OC, 46),
             dw0 = uniform(OC * IC, 47);
  Array<float> dx_in(x), dwt(w), ddy(dy), ddw(dw0), dout = poisoned(N * OC), ddx = poisoned(N * IC);
  cuda::linear_forward(blas, dout.data(), dx_in.data(), dwt.data(), N, IC, OC);
  cuda::linear_backward(blas, ddx.data(), ddw.data(), ddy.data(), dx_in.data(), dwt.data(), N, IC, OC);
  std::vector<double> out(N * OC), dxr(N * IC), dwr = to_double(dw0);
  ref::linear_forward(out.data(), to_double(x).data(), to_double(w).data(), N, IC, OC);
  ref::linear_backward(dxr.data(), dwr.data(), to_double(dy).data(), to_double(x).data(), to_double(w).data(),
                       N, IC, OC);
  expect_close("linear", "out", dout.download(), out);
  expect_close("linear", "dinp", ddx.download(), dxr);
  expect_close("linear", "dweight", ddw.download(), dwr);
}

// bf16 inputs, fp32 accumulation. Two bounds:
//  - against the exact product of the bf16-rounded inputs: only the fp32
//    accumulation differs (each bf16 × bf16 product is exact in fp32), a
//    relative L2 error of order √K·2⁻²⁴ ≈ 3e-6 at K = 1000 for random signs;
//    bound 2e-5.
//  - against the exact product of the fp32 inputs: each input carries a
//    rounding error of at most u = 2⁻⁸ (8-bit significand; rms ≈ 0.42·u over
//    a binade), independent and of random sign, so the relative L2 error is
//    about √2·0.42·u ≈ 2.3e-3 for uniform data; bound u ≈ 3.9e-3.
TEST(CudaGemm, Bf16InputsFp32Accumulation) {
  cuda::Blas blas;
  const int64_t M = 96, N = 75, K = 1000;
  const auto A = uniform(M * K, 48), B = uniform(N * K, 49);  // C = A·Bᵀ, the linear layer's shape
  std::vector<bf16> Ah(A.size()), Bh(B.size());
  std::vector<double> Ar(A.size()), Br(B.size());
  for (size_t i = 0; i < A.size(); ++i) {
    Ah[i] = float_to_bf16(A[i]);
    Ar[i] = bf16_to_float(Ah[i]);
  }
  for (size_t i = 0; i < B.size(); ++i) {
    Bh[i] = float_to_bf16(B[i]);
    Br[i] = bf16_to_float(Bh[i]);
  }
  // The inputs go up as fp32 and are cast on the device, which checks the cast too.
  Array<float> dA32(A), dB32(B), dC = poisoned(M * N), back(M * K);
  Array<bf16> dA(M * K), dB(N * K);
  cuda::f32_to_bf16(dA.data(), dA32.data(), M * K);
  cuda::f32_to_bf16(dB.data(), dB32.data(), N * K);
  const auto dev_bits = dA.download();
  int64_t cast_mismatch = 0;
  for (size_t i = 0; i < Ah.size(); ++i)
    cast_mismatch += dev_bits[i].bits != Ah[i].bits;
  EXPECT_EQ(cast_mismatch, 0) << "device f32→bf16 differs from core/bf16.h";
  cuda::bf16_to_f32(back.data(), dA.data(), M * K);
  expect_close("bf16_cast", "roundtrip", back.download(), Ar, 0.0);
  cuda::gemm_bf16(blas, Trans::no, Trans::yes, M, N, K, dA.data(), K, dB.data(), K, dC.data(), N,
                  Out::assign);
  const auto C = dC.download();
  const std::vector<double> zero(M * N, 0.0);
  expect_close("gemm_bf16", "vs_rounded_inputs", C,
               gemm_ref(Trans::no, Trans::yes, M, N, K, Ar, K, Br, K, zero, N, Out::assign), 2e-5);
  expect_close(
      "gemm_bf16", "vs_fp32_inputs", C,
      gemm_ref(Trans::no, Trans::yes, M, N, K, to_double(A), K, to_double(B), K, zero, N, Out::assign),
      3.9e-3);
}

}  // namespace
}  // namespace mt::testing

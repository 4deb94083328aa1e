// Operands of a row-major sgemm test problem, shared by the bf16 tests of the
// emulated and the oneDNN kernels (test_gemm_bf16.cpp, test_gemm_onednn.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/gemm.h"
#include "test_helpers.h"

namespace mt::testing {

struct GemmOperands {
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C0;  // C0: what C holds before the call
};

// op(A)[M, K], op(B)[K, N] uniform in [-2, 2) and C0 [M, N] uniform in
// random_floats' default range, every stored row `pad` floats longer than its
// width (so that ld > the row's width).
inline GemmOperands random_gemm_operands(int64_t M, int64_t N, int64_t K, Trans ta, Trans tb, int64_t pad,
                                         uint32_t seed) {
  GemmOperands o;
  const int64_t a_rows = ta == Trans::yes ? K : M, a_cols = ta == Trans::yes ? M : K;
  const int64_t b_rows = tb == Trans::yes ? N : K, b_cols = tb == Trans::yes ? K : N;
  o.lda = a_cols + pad;
  o.ldb = b_cols + pad;
  o.ldc = N + pad;
  o.A = random_floats(static_cast<size_t>(a_rows * o.lda), seed, -2.0f, 2.0f);
  o.B = random_floats(static_cast<size_t>(b_rows * o.ldb), seed + 1, -2.0f, 2.0f);
  o.C0 = random_floats(static_cast<size_t>(M * o.ldc), seed + 2);
  return o;
}

}  // namespace mt::testing

// Small bf16 matrix products on AMX tiles (docs/MODEL.md "Kernels"):
// attention's 64 × 64 tile products, which oneDNN's matmul runs at a fraction
// of the units' rate because a call's fixed cost (the primitive's dispatch,
// and around it the cache lookup, the memory objects and the operand rounding)
// is several times the product's. The same rule as the oneDNN kernel: each
// operand rounded to bf16 by core/bf16.h's float_to_bf16, the products summed
// in fp32 by tdpbf16ps (which, like every bf16 unit, takes a subnormal operand
// as 0 and flushes a subnormal result), C and Out::add in fp32. Internal to
// src/ops: the oneDNN kernel (gemm_onednn.cpp) hands it the products that fit,
// when oneDNN itself would run AMX.
#pragma once

#include <cstdint>
#include <string>

#include "ops/gemm.h"

namespace mt::amx {

// The largest product it takes: op(A) and C at most kMaxRows × kMaxCols, K at
// most kMaxDepth (the packed operands and C live in per-thread scratch).
constexpr int64_t kMaxRows = 128;
constexpr int64_t kMaxCols = 128;
constexpr int64_t kMaxDepth = 256;

constexpr bool fits(int64_t M, int64_t N, int64_t K) {
  return M <= kMaxRows && N <= kMaxCols && K <= kMaxDepth;
}

// Empty when the tiles can run in this process (the CPU has AMX-TILE and
// AMX-BF16, and Linux granted the process the tile state); otherwise why
// not, as a clause. Asked once and remembered.
const std::string& unavailable_reason();

// sgemm's contract under MatmulPrecision::bf16 (gemm.h) for 1 ≤ M, N, K with
// fits(M, N, K). Runs on the calling thread; safe from many threads at once.
// Only when available.
void sgemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float* C, int64_t ldc, Out out);

}  // namespace mt::amx

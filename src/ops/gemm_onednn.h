// bf16 matrix products through oneDNN's matmul (docs/MODEL.md "Precision"):
// the operands rounded to bf16 exactly as the emulated rule rounds them
// (core/bf16.h), multiplied by the CPU's bf16 instructions (AVX512-BF16 or AMX)
// with fp32 accumulation and an fp32 result. Internal to src/ops: sgemm
// (gemm.cpp) calls it when the bf16 kernel is onednn. gemm_onednn.cpp
// implements it; gemm_onednn_absent.cpp stands in for a build without oneDNN
// (the CMake option MESHTRAIN_WITH_ONEDNN, or no libdnnl-dev).
#pragma once

#include <cstdint>
#include <string>

#include "ops/gemm.h"

namespace mt::onednn {

// Empty when this path can run in this process; otherwise why not, as a
// clause ("this build has no oneDNN", "the CPU's ISA avx512_core has no bf16
// instructions"). Asked once and remembered.
const std::string& unavailable_reason();

// What runs, e.g. "oneDNN 2.6.3 avx512_core_bf16 (brg:avx512_core_bf16)": the
// library's version, the effective ISA and the implementation oneDNN picks for
// a model-sized product. Only when available.
std::string describe();

// sgemm's contract under MatmulPrecision::bf16 (gemm.h), M, N, K ≥ 1. Safe to
// call from many threads at once (attention's OpenMP workers): primitives are
// cached per shape behind a mutex; operand scratch, scratchpad and stream are
// per thread. Only when available.
void sgemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float* C, int64_t ldc, Out out);

}  // namespace mt::onednn

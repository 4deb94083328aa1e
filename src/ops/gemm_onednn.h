// bf16 matrix products through oneDNN's matmul (docs/MODEL.md "Precision"):
// the operands rounded to bf16 exactly as the emulated rule rounds them
// (core/bf16.h), multiplied by the CPU's bf16 instructions (AVX512-BF16 or AMX)
// with fp32 accumulation and an fp32 result. Internal to src/ops: sgemm
// (gemm.cpp) calls it when the bf16 kernel is onednn. gemm_onednn.cpp
// implements it; gemm_onednn_absent.cpp stands in for a build without oneDNN
// (the CMake option MESHTRAIN_WITH_ONEDNN, or no libdnnl-dev).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

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

// sgemm's contract under MatmulPrecision::bf16 (gemm.h), M, N, K ≥ 1: the
// products that fit amx::fits on AMX tiles (gemm_amx.h) where oneDNN itself
// runs AMX (its effective ISA avx512_core_amx, so ONEDNN_MAX_CPU_ISA caps both),
// every other product through matmul_bf16. Only when available.
void sgemm_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float* C, int64_t ldc, Out out);

// Whether sgemm_bf16 hands an M × N × K product to the AMX tiles.
bool tiles_take(int64_t M, int64_t N, int64_t K);

// The same contract through oneDNN's matmul whatever the size. Safe to call
// from many threads at once (attention's OpenMP workers): primitives are
// cached per shape behind a mutex; operand scratch, scratchpad and stream are
// per thread. Only when available.
void matmul_bf16(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                 const float* B, int64_t ldb, float* C, int64_t ldc, Out out);

// linear_forward and linear_backward (gemm.h) through matmul_bf16's products
// with the same bits: the weight's bf16 bits the kept ones where it lies in a
// range set by set_weight_ranges, and dout rounded once for both gradients
// (sgemm would round it twice). Only when available.
void linear_forward_bf16(float* out, const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC,
                         Out mode);
void linear_backward_bf16(float* dinp, float* dweight, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IC, int64_t OC);

// Bf16WeightBits's ranges (empty: none), dropping every kept bit.
void set_weight_ranges(std::vector<std::span<const float>> ranges);

}  // namespace mt::onednn

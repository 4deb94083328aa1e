// Matrix products. cblas_sgemm is the only BLAS entry point in meshtrain; it is
// called from here and nowhere else.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mt {

enum class Trans { no, yes };
enum class Out { assign, add };  // write the result, or add it to what is there

// What a matrix product computes (docs/MODEL.md "Precision").
//   fp32: fp32 operands, fp32 accumulation (BLAS as it is).
//   bf16: each element of op(A) and op(B) is first rounded to bf16 (round to
//         nearest, ties to even: core/bf16.h's round_to_bf16), then multiplied
//         and accumulated in fp32 and written to C in fp32 — mixed precision
//         emulated exactly on the CPU (a bf16 × bf16 product is exact in fp32),
//         the rule a GPU's bf16 GEMM with fp32 accumulation follows.
enum class MatmulPrecision { fp32, bf16 };

// "fp32" or "bf16"; ConfigError names any other value and the key it came
// from (train.precision, or the --precision flag of eval and generate).
MatmulPrecision parse_matmul_precision(const std::string& name, const char* key = "train.precision");
const char* matmul_precision_name(MatmulPrecision p);

// The process-wide precision of every sgemm call, like PyTorch's
// torch.set_float32_matmul_precision: one setting read by every thread (the
// OpenMP workers of attention and the experts included), set by the trainer,
// eval and generate from train.precision. Default fp32. Set it only while no
// sgemm runs; reading it from many threads at once is safe.
void set_matmul_precision(MatmulPrecision p);
MatmulPrecision matmul_precision();

// Sets the precision for a scope and puts the previous one back at its end.
class MatmulPrecisionGuard {
 public:
  explicit MatmulPrecisionGuard(MatmulPrecision p) : previous_(matmul_precision()) {
    set_matmul_precision(p);
  }
  ~MatmulPrecisionGuard() { set_matmul_precision(previous_); }
  MatmulPrecisionGuard(const MatmulPrecisionGuard&) = delete;
  MatmulPrecisionGuard& operator=(const MatmulPrecisionGuard&) = delete;

 private:
  MatmulPrecision previous_;
};

// Which kernel computes a product under MatmulPrecision::bf16. Both follow the
// one rule above (the same rounded operands, fp32 accumulation) and differ only
// in the order of the fp32 sums and in denormals (docs/MODEL.md "Precision"):
//   emulated: the operands rounded into fp32 scratch, then OpenBLAS's sgemm —
//             the reference, bitwise what every earlier release computed;
//   onednn:   the operands rounded to bf16, then oneDNN's matmul on the CPU's
//             bf16 units (AVX512-BF16 or AMX), fp32 accumulation; those units
//             flush denormal operands, products and partial sums to zero.
// Process-wide like the precision. Chosen from the environment variable
// MESHTRAIN_BF16_MATMUL the first time bf16 is set (set_matmul_precision):
// "emulated", "onednn" (refused where it cannot run), or unset: onednn where
// this build has oneDNN and the CPU has bf16 instructions, else emulated.
enum class Bf16Kernel { emulated, onednn };

// The kernel a value of MESHTRAIN_BF16_MATMUL selects (null: unset), or a
// ConfigError naming the value and the rule, or why onednn cannot run here.
Bf16Kernel resolve_bf16_kernel(const char* env_value);
// Empty when the onednn kernel can run in this process; otherwise why not.
const std::string& onednn_bf16_unavailable();
// Set it only while no sgemm runs; set_bf16_kernel(onednn) refuses (ConfigError)
// where onednn_bf16_unavailable() is not empty.
void set_bf16_kernel(Bf16Kernel k);
Bf16Kernel bf16_kernel();
// The start-up line's text: "oneDNN 2.6.3 avx512_core_bf16 (brg:avx512_core_bf16)"
// or "emulated (MESHTRAIN_BF16_MATMUL=emulated)" / "emulated (<why not oneDNN>)".
std::string bf16_kernel_description();

// The canonical mode's products (parallel.reduction = canonical;
// docs/PARALLELISM.md "The canonical mode"): on, every product's rows are cut
// into fixed blocks of kFixedRowBlock, each one single-threaded OpenBLAS call,
// so that an element's bits do not depend on the thread count. Set once per
// run, like the precision (FixedGemmBlocksGuard).
inline constexpr int64_t kFixedRowBlock = 128;
void set_fixed_gemm_blocks(bool on);
bool fixed_gemm_blocks();

class FixedGemmBlocksGuard {
 public:
  explicit FixedGemmBlocksGuard(bool on) : previous_(fixed_gemm_blocks()) { set_fixed_gemm_blocks(on); }
  ~FixedGemmBlocksGuard() { set_fixed_gemm_blocks(previous_); }
  FixedGemmBlocksGuard(const FixedGemmBlocksGuard&) = delete;
  FixedGemmBlocksGuard& operator=(const FixedGemmBlocksGuard&) = delete;

 private:
  bool previous_;
};

// Row-major C[M, N] = op(A)[M, K] · op(B)[K, N] (+ C when out == Out::add).
// lda, ldb, ldc are the row strides (in floats) of A, B, C as stored.
// Under MatmulPrecision::bf16 the operands are rounded into per-thread scratch
// (thread_local std::vector, not tracked by core/memory.h: it grows to the
// largest operand a thread has seen and lives as long as the thread; fp32
// under the emulated kernel, bf16 under onednn); A and B themselves are never
// written.
void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float* C, int64_t ldc, Out out);

// A step's bf16 weights, rounded once (docs/MODEL.md "Weights are rounded once
// per step"). While one is alive, linear_forward and linear_backward under the
// onednn bf16 kernel keep the bf16 bits of a weight operand that lies inside
// one of `ranges` — buffers the caller promises nothing writes until it is
// destroyed (ParamStore::resident_params) — by address, and reuse them for
// every later product with that weight: the same bits as rounding it again.
// Any other weight (a gathered or scratch buffer) is rounded per call as
// before. The bits are host scratch outside core/memory.h's tracker, like
// sgemm's operand scratch: 2 bytes per weight element used, kept for the
// process so that the next step rounds into the same memory. One at a time.
class Bf16WeightBits {
 public:
  explicit Bf16WeightBits(std::vector<std::span<const float>> ranges);
  ~Bf16WeightBits();
  Bf16WeightBits(const Bf16WeightBits&) = delete;
  Bf16WeightBits& operator=(const Bf16WeightBits&) = delete;
};

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

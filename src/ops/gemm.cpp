#include "ops/gemm.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "core/bf16.h"
#include "core/error.h"
#include "ops/cpu_kernels.h"
#include "ops/gemm_amx.h"
#include "ops/gemm_onednn.h"

namespace mt {
namespace {

std::atomic<MatmulPrecision> g_precision{MatmulPrecision::fp32};
std::atomic<bool> g_fixed_blocks{false};
std::atomic<Bf16Kernel> g_bf16_kernel{Bf16Kernel::emulated};
std::once_flag g_bf16_kernel_chosen;
bool g_bf16_kernel_from_env = false;  // written once, under g_bf16_kernel_chosen

// The stored rows × cols block of a row-major operand (row stride ld), each
// element rounded to bf16, packed densely (row stride cols) into scratch. One
// scratch per thread and operand: sgemm runs on many OpenMP threads at once.
const float* rounded_copy(const float* X, int64_t rows, int64_t cols, int64_t ld,
                          std::vector<float>& scratch) {
  scratch.resize(static_cast<size_t>(rows * cols));
  float* out = scratch.data();
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = X + r * ld;
    float* o = out + r * cols;
    for (int64_t c = 0; c < cols; ++c)
      o[c] = round_to_bf16(x[c]);
  }
  return out;
}

void one_sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
               const float* B, int64_t ldb, float* C, int64_t ldc, Out out) {
  const float beta = out == Out::add ? 1.0f : 0.0f;
  cblas_sgemm(CblasRowMajor, trans_a == Trans::yes ? CblasTrans : CblasNoTrans,
              trans_b == Trans::yes ? CblasTrans : CblasNoTrans, static_cast<blasint>(M),
              static_cast<blasint>(N), static_cast<blasint>(K), 1.0f, A, static_cast<blasint>(lda), B,
              static_cast<blasint>(ldb), beta, C, static_cast<blasint>(ldc));
}

// C's rows in blocks of kFixedRowBlock (the last one shorter), each block one
// OpenBLAS call on one thread, the blocks shared among this rank's threads.
// OpenBLAS's own threading cuts M and N by the thread count, and the elements
// at a cut are then computed by its edge kernels, with other bits
// (tests/ops/test_gemm_invariance.cpp); here every element is computed by the
// same call whatever the thread count. Inside the parallel region OpenBLAS
// (its OpenMP build) runs on the calling thread.
void fixed_block_sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A,
                       int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc, Out out) {
  const int64_t blocks = (M + kFixedRowBlock - 1) / kFixedRowBlock;
#pragma omp parallel for schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t first = b * kFixedRowBlock, rows = std::min(kFixedRowBlock, M - first);
    const float* a = trans_a == Trans::yes ? A + first : A + first * lda;  // A stored K × M when transposed
    one_sgemm(trans_a, trans_b, rows, N, K, a, lda, B, ldb, C + first * ldc, ldc, out);
  }
}

void blas_sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float* C, int64_t ldc, Out out) {
  if (g_fixed_blocks.load(std::memory_order_relaxed))
    fixed_block_sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, out);
  else
    one_sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, out);
}

}  // namespace

MatmulPrecision parse_matmul_precision(const std::string& name, const char* key) {
  if (name == "fp32") return MatmulPrecision::fp32;
  MT_REQUIRE(name == "bf16", ConfigError, key, " (", name, ") must be fp32 or bf16");
  return MatmulPrecision::bf16;
}

const char* matmul_precision_name(MatmulPrecision p) {
  return p == MatmulPrecision::bf16 ? "bf16" : "fp32";
}

Bf16Kernel resolve_bf16_kernel(const char* env_value) {
  const std::string& why_not = onednn::unavailable_reason();
  if (env_value == nullptr || *env_value == '\0')
    return why_not.empty() ? Bf16Kernel::onednn : Bf16Kernel::emulated;
  const std::string v = env_value;
  if (v == "emulated") return Bf16Kernel::emulated;
  MT_REQUIRE(v == "onednn", ConfigError, "MESHTRAIN_BF16_MATMUL (", v, ") must be emulated or onednn");
  MT_REQUIRE(why_not.empty(), ConfigError, "MESHTRAIN_BF16_MATMUL (onednn) cannot run here: ", why_not);
  return Bf16Kernel::onednn;
}

const std::string& onednn_bf16_unavailable() {
  return onednn::unavailable_reason();
}

void set_bf16_kernel(Bf16Kernel k) {
  MT_REQUIRE(k == Bf16Kernel::emulated || onednn::unavailable_reason().empty(), ConfigError,
             "the onednn bf16 kernel cannot run here: ", onednn::unavailable_reason());
  g_bf16_kernel.store(k, std::memory_order_relaxed);
}

Bf16Kernel bf16_kernel() {
  return g_bf16_kernel.load(std::memory_order_relaxed);
}

std::string bf16_kernel_description() {
  if (bf16_kernel() == Bf16Kernel::onednn) return onednn::describe();
  if (g_bf16_kernel_from_env && onednn::unavailable_reason().empty())
    return "emulated (MESHTRAIN_BF16_MATMUL=emulated)";
  if (onednn::unavailable_reason().empty()) return "emulated";
  return "emulated (" + onednn::unavailable_reason() + ")";
}

void set_matmul_precision(MatmulPrecision p) {
  if (p == MatmulPrecision::bf16) {
    std::call_once(g_bf16_kernel_chosen, [] {
      const char* env = std::getenv("MESHTRAIN_BF16_MATMUL");
      g_bf16_kernel.store(resolve_bf16_kernel(env), std::memory_order_relaxed);
      g_bf16_kernel_from_env = env != nullptr && *env != '\0';
    });
  }
  g_precision.store(p, std::memory_order_relaxed);
}

MatmulPrecision matmul_precision() {
  return g_precision.load(std::memory_order_relaxed);
}

void set_fixed_gemm_blocks(bool on) {
  g_fixed_blocks.store(on, std::memory_order_relaxed);
}

bool fixed_gemm_blocks() {
  return g_fixed_blocks.load(std::memory_order_relaxed);
}

void cpu::sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
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
  if (matmul_precision() == MatmulPrecision::fp32) {
    blas_sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, out);
    return;
  }
  if (bf16_kernel() == Bf16Kernel::onednn) {
    onednn::sgemm_bf16(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, out);
    return;
  }
  // As stored, A is M × K (K × M when transposed) and B is K × N (N × K).
  thread_local std::vector<float> a_scratch, b_scratch;
  const bool ta = trans_a == Trans::yes, tb = trans_b == Trans::yes;
  const float* a = rounded_copy(A, ta ? K : M, ta ? M : K, lda, a_scratch);
  const float* b = rounded_copy(B, tb ? N : K, tb ? K : N, ldb, b_scratch);
  blas_sgemm(trans_a, trans_b, M, N, K, a, ta ? M : K, b, tb ? K : N, C, ldc, out);
}

namespace {

// Whether a linear layer's products go through the oneDNN kernel's linear
// functions: under the onednn bf16 kernel, for products past the AMX tiles'
// limit (there sgemm would not take the tiles either, so the bits are sgemm's).
bool onednn_linear(int64_t M, int64_t N, int64_t K) {
  return M > 0 && N > 0 && K > 0 && matmul_precision() == MatmulPrecision::bf16 &&
         bf16_kernel() == Bf16Kernel::onednn && !amx::fits(M, N, K);
}

}  // namespace

Bf16WeightBits::Bf16WeightBits(std::vector<std::span<const float>> ranges) {
  onednn::set_weight_ranges(std::move(ranges));
}

Bf16WeightBits::~Bf16WeightBits() {
  onednn::set_weight_ranges({});
}

void cpu::linear_forward(float* out, const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC,
                         Out mode) {
  if (onednn_linear(N, OC, IC)) return onednn::linear_forward_bf16(out, inp, weight, N, IC, OC, mode);
  // out[N, OC] = inp[N, IC] · weight[OC, IC]ᵀ
  cpu::sgemm(Trans::no, Trans::yes, N, OC, IC, inp, IC, weight, IC, out, OC, mode);
}

void cpu::linear_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IC, int64_t OC) {
  // Through the oneDNN kernel's linear function when every product it makes
  // qualifies: dout rounded once for both gradients, the weight's bits kept.
  if ((dinp == nullptr || onednn_linear(N, IC, OC)) && (dweight == nullptr || onednn_linear(OC, IC, N)) &&
      (dinp != nullptr || dweight != nullptr)) {
    onednn::linear_backward_bf16(dinp, dweight, dout, inp, weight, N, IC, OC);
    return;
  }
  if (dinp != nullptr) {
    // dinp[N, IC] = dout[N, OC] · weight[OC, IC]
    cpu::sgemm(Trans::no, Trans::no, N, IC, OC, dout, OC, weight, IC, dinp, IC, Out::assign);
  }
  if (dweight != nullptr) {
    // dweight[OC, IC] += dout[N, OC]ᵀ · inp[N, IC]
    cpu::sgemm(Trans::yes, Trans::no, OC, IC, N, dout, OC, inp, IC, dweight, IC, Out::add);
  }
}

}  // namespace mt

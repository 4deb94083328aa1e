// The kernel seam: one table of operations per backend, chosen once per run
// (set_kernels, from train.device), behind which sit every op of src/ops
// (forward and backward), the GEMMs, the optimizers' element updates and the
// primitives the model and parallel layers would otherwise write as raw loops.
// The free functions the rest of meshtrain calls (ops/rmsnorm.h, ...) are thin
// dispatchers into the table, so the model's op calls name no device.
//
// Every pointer argument is a pointer on the run's device (core/device.h);
// scalars, sizes and the small host structs (AttentionDims, DropoutKey,
// RouterDims) are host values. A kernel returning a value (router_forward's
// auxiliary-loss sum, sum_squares; exact_sum_squares into a host accumulator)
// returns it to the host: those are crossings
// too (docs/ARCHITECTURE.md "The kernel seam").
//
// Backends: `cpu` (ops/cpu_kernels.h: OpenBLAS or oneDNN GEMMs by
// train.precision, hand-written loops), `fake` (for tests: the cpu kernels
// behind core/fake_device.h's faulting pointers). A CUDA table is the GPU
// trainer's (src/cuda holds its kernels).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/exact_sum.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/gemm.h"
#include "ops/rope.h"
#include "ops/router.h"
#include "ops/vocab_kernels.h"

namespace mt {

struct KernelTable {
  const char* name = "";

  // GEMM: C = op(A)·op(B) (or C += …), at matmul_precision() (ops/gemm.h).
  void (*sgemm)(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                const float* B, int64_t ldb, float* C, int64_t ldc, Out out) = nullptr;
  // The linear layer's products (ops/gemm.h), so that a backend may share
  // work between them (the bf16 kernel rounds dout once, keeps the weights' bits).
  void (*linear_forward)(float* out, const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC,
                         Out mode) = nullptr;
  void (*linear_backward)(float* dinp, float* dweight, const float* dout, const float* inp,
                          const float* weight, int64_t N, int64_t IC, int64_t OC) = nullptr;

  // The model's ops, forward and backward (contracts in their headers).
  void (*embedding_forward)(float* out, const int32_t* ids, const float* table, int64_t N,
                            int64_t C) = nullptr;
  void (*embedding_backward)(float* dtable, const float* dout, const int32_t* ids, int64_t N,
                             int64_t C) = nullptr;
  void (*rmsnorm_forward)(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                          int64_t C, float eps) = nullptr;
  void (*rmsnorm_backward)(float* dinp, float* dweight, const float* dout, const float* inp,
                           const float* weight, const float* rstd, int64_t N, int64_t C) = nullptr;
  void (*rope_forward)(float* x, const int32_t* pos, const RopeTable& table, int64_t N, int64_t n_heads,
                       int64_t row_stride) = nullptr;
  void (*rope_backward)(float* dx, const int32_t* pos, const RopeTable& table, int64_t N, int64_t n_heads,
                        int64_t row_stride) = nullptr;
  void (*swiglu_forward)(float* out, const float* gu, int64_t N, int64_t F) = nullptr;
  void (*swiglu_backward)(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F) = nullptr;
  void (*attention_forward)(float* out, float* lse, const float* q, const float* k, const float* v,
                            const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) = nullptr;
  void (*attention_backward)(float* dq, float* dk, float* dv, const float* dout, const float* out,
                             const float* lse, const float* q, const float* k, const float* v,
                             const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) = nullptr;
  void (*attention_merge)(float* out, float* lse, const float* out_part, const float* lse_part,
                          const AttentionDims& d) = nullptr;
  void (*cross_entropy_forward)(float* losses, float* lse, const float* logits, const int32_t* targets,
                                int64_t N, int64_t V, int32_t ignore_index) = nullptr;
  void (*cross_entropy_backward)(float* dlogits, const float* logits, const float* lse,
                                 const int32_t* targets, float dloss, int64_t N, int64_t V,
                                 int32_t ignore_index) = nullptr;
  void (*dropout_rows)(float* x, int64_t rows, int64_t C, const DropoutKey& k,
                       const TokenCoords& at) = nullptr;
  double (*router_forward)(float* probs, float* lse, int32_t* experts, float* weights, const float* logits,
                           const float* bias, RouterDims d) = nullptr;
  void (*router_backward)(float* dlogits, const float* dweights, const float* dprob_all, float z_scale,
                          const float* probs, const float* lse, const int32_t* experts, const float* weights,
                          RouterDims d) = nullptr;

  // The optimizers' element updates and the gradient norm (ops/optimizer_kernels.h).
  void (*adamw_update)(float* params, const float* grads, float* m, float* v, int64_t n, double lr,
                       double beta1, double beta2, double eps, double weight_decay, int64_t t) = nullptr;
  void (*sgd_update)(float* params, const float* grads, float* buf, int64_t n, double lr, double momentum,
                     bool nesterov, double weight_decay) = nullptr;
  void (*lamb_direction)(const float* params, float* grads, float* m, float* v, int64_t n, double beta1,
                         double beta2, double eps, double weight_decay, int64_t t) = nullptr;
  double (*sum_squares)(const float* g, int64_t n) = nullptr;
  void (*exact_sum_squares)(ExactSum* acc, const float* g, int64_t n) = nullptr;  // acc: host

  // The vocabulary-parallel embedding's and cross-entropy's local parts (ops/vocab_kernels.h).
  void (*vocab_lookup)(float* out, const int32_t* ids, const float* table_local, int64_t N, int64_t C,
                       int64_t V, VocabRange vs) = nullptr;
  void (*vocab_lookup_backward)(float* dtable_local, const float* dout, const int32_t* ids, int64_t N,
                                int64_t C, int64_t V, VocabRange vs) = nullptr;
  void (*vocab_ce_max)(double* max, const float* logits_local, int64_t N, VocabRange vs) = nullptr;
  void (*vocab_ce_sums)(double* sum, double* target, const float* logits_local, const int32_t* targets,
                        const double* max, int64_t N, int64_t V, int32_t ignore_index,
                        VocabRange vs) = nullptr;
  void (*vocab_ce_finish)(float* losses, float* lse, const double* max, const double* sum,
                          const double* target, const int32_t* targets, int64_t N,
                          int32_t ignore_index) = nullptr;
  void (*vocab_ce_backward)(float* dlogits_local, const float* logits_local, const float* lse,
                            const int32_t* targets, float dloss, int64_t N, int64_t V, int32_t ignore_index,
                            VocabRange vs) = nullptr;

  // Primitives (ops/primitives.h).
  void (*add)(float* y, const float* x, int64_t n) = nullptr;            // y += x
  void (*axpy)(float* y, float a, const float* x, int64_t n) = nullptr;  // y += a·x
  void (*scale)(float* y, float a, int64_t n) = nullptr;                 // y *= a
  void (*fill)(float* y, float value, int64_t n) = nullptr;              // y = value
  void (*copy_rows)(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
                    int64_t cols) = nullptr;  // a strided block of rows × cols
  void (*add_rows)(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
                   int64_t cols) = nullptr;  // dst += src over a strided block of rows × cols
  int64_t (*count_nonfinite)(const float* x, int64_t n) = nullptr;  // to the host

  // The feature-split RMSNorm's local parts (ops/split_rmsnorm.h).
  void (*split_rmsnorm_sum_squares)(double* ss, const float* inp, int64_t N, int64_t C) = nullptr;
  void (*split_rmsnorm_scale)(float* out, float* rstd, const float* inp, const float* w, const double* ss,
                              int64_t N, int64_t C, int64_t d, float eps) = nullptr;
  void (*split_rmsnorm_dot)(double* dot, const float* dout, const float* inp, const float* w, int64_t N,
                            int64_t C) = nullptr;
  void (*split_rmsnorm_backward)(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                                 const float* rstd, const double* dot, int64_t N, int64_t C,
                                 int64_t d) = nullptr;

  // The mixture-of-experts layer's row moves and weighted sums (ops/moe_kernels.h).
  void (*moe_dispatch)(float* xs, const float* x, const int64_t* order, int64_t R, int64_t k,
                       int64_t C) = nullptr;
  void (*moe_dispatch_backward)(float* dx, const float* dxs, const int64_t* row_of, int64_t N, int64_t k,
                                int64_t C) = nullptr;
  void (*moe_combine)(float* yk, const float* ys, const int64_t* row_of, int64_t choices,
                      int64_t C) = nullptr;
  void (*moe_combine_backward)(float* dys, const float* dyk, const int64_t* order, int64_t R,
                               int64_t C) = nullptr;
  void (*moe_weighted_sum)(float* y, const float* mid, const float* w, const float* yk, int64_t N, int64_t k,
                           int64_t C) = nullptr;
  void (*moe_weighted_sum_backward)(float* dyk, float* dw, const float* dy, const float* w, const float* yk,
                                    int64_t N, int64_t k, int64_t C) = nullptr;
};

// The run's table: the cpu one until set_kernels is called (once, at start-up).
const KernelTable& kernels();
void set_kernels(const KernelTable& table);

const KernelTable& cpu_kernels();
const KernelTable& fake_kernels();

// train.device: "cpu", "fake" or "cuda". Chooses the kernel table and the run's
// allocator together; refuses a device this build cannot run, by name.
enum class RunDevice { cpu, fake, cuda };
RunDevice parse_run_device(std::string_view name, std::string_view key = "train.device");
const char* run_device_name(RunDevice d);
// Refuses, by name, a device this build has no kernel table for (cuda today).
void check_run_device(RunDevice d);
void use_run_device(RunDevice d);
// The run's device for a scope: restores cpu on exit (tests run several in one process).
class RunDeviceGuard {
 public:
  explicit RunDeviceGuard(RunDevice d) { use_run_device(d); }
  ~RunDeviceGuard() { use_run_device(RunDevice::cpu); }
  RunDeviceGuard(const RunDeviceGuard&) = delete;
  RunDeviceGuard& operator=(const RunDeviceGuard&) = delete;
};

}  // namespace mt

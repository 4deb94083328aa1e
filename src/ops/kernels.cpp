#include "ops/kernels.h"

#include "core/error.h"
#include "core/fake_device.h"
#include "ops/attention.h"
#include "ops/cpu_kernels.h"
#include "ops/cross_entropy.h"
#include "ops/embedding.h"
#include "ops/optimizer_kernels.h"
#include "ops/primitives.h"
#include "ops/rmsnorm.h"
#include "ops/swiglu.h"
#include "ops/vocab_kernels.h"

namespace mt {
namespace {

const KernelTable* g_table = nullptr;

KernelTable make_cpu_table() {
  KernelTable t;
  t.name = "cpu";
  t.sgemm = &cpu::sgemm;
  t.linear_forward = &cpu::linear_forward;
  t.linear_backward = &cpu::linear_backward;
  t.embedding_forward = &cpu::embedding_forward;
  t.embedding_backward = &cpu::embedding_backward;
  t.rmsnorm_forward = &cpu::rmsnorm_forward;
  t.rmsnorm_backward = &cpu::rmsnorm_backward;
  t.rope_forward = &cpu::rope_forward;
  t.rope_backward = &cpu::rope_backward;
  t.swiglu_forward = &cpu::swiglu_forward;
  t.swiglu_backward = &cpu::swiglu_backward;
  t.attention_forward = &cpu::attention_forward;
  t.attention_backward = &cpu::attention_backward;
  t.attention_merge = &cpu::attention_merge;
  t.cross_entropy_forward = &cpu::cross_entropy_forward;
  t.cross_entropy_backward = &cpu::cross_entropy_backward;
  t.dropout_rows = &cpu::dropout_rows;
  t.router_forward = &cpu::router_forward;
  t.router_backward = &cpu::router_backward;
  t.adamw_update = &cpu::adamw_update;
  t.sgd_update = &cpu::sgd_update;
  t.lamb_direction = &cpu::lamb_direction;
  t.sum_squares = &cpu::sum_squares;
  t.exact_sum_squares = &cpu::exact_sum_squares;
  t.vocab_lookup = &cpu::vocab_lookup;
  t.vocab_lookup_backward = &cpu::vocab_lookup_backward;
  t.vocab_ce_max = &cpu::vocab_ce_max;
  t.vocab_ce_sums = &cpu::vocab_ce_sums;
  t.vocab_ce_finish = &cpu::vocab_ce_finish;
  t.vocab_ce_backward = &cpu::vocab_ce_backward;
  t.add = &cpu::add;
  t.axpy = &cpu::axpy;
  t.scale = &cpu::scale;
  t.fill = &cpu::fill;
  t.copy_rows = &cpu::copy_rows;
  t.add_rows = &cpu::add_rows;
  t.count_nonfinite = &cpu::count_nonfinite;
  t.split_rmsnorm_sum_squares = &cpu::split_rmsnorm_sum_squares;
  t.split_rmsnorm_scale = &cpu::split_rmsnorm_scale;
  t.split_rmsnorm_dot = &cpu::split_rmsnorm_dot;
  t.split_rmsnorm_backward = &cpu::split_rmsnorm_backward;
  t.moe_dispatch = &cpu::moe_dispatch;
  t.moe_dispatch_backward = &cpu::moe_dispatch_backward;
  t.moe_combine = &cpu::moe_combine;
  t.moe_combine_backward = &cpu::moe_combine_backward;
  t.moe_weighted_sum = &cpu::moe_weighted_sum;
  t.moe_weighted_sum_backward = &cpu::moe_weighted_sum_backward;
  return t;
}

// The fake device's kernel for a cpu kernel F: its pointer arguments untagged,
// the rest passed as they are.
template <auto F>
struct Untagged;
template <class R, class... A, R (*F)(A...)>
struct Untagged<F> {
  static R call(A... a) { return F(fake_host_arg(a)...); }
};

// The host structs that carry device pointers, untagged field by field.
AttentionDims untagged_dims(const AttentionDims& d, AttentionDropout* dropout) {
  AttentionDims h = d;
  if (d.dropout != nullptr) {
    *dropout = *d.dropout;
    dropout->seq = fake_untag(d.dropout->seq);
    h.dropout = dropout;
  }
  return h;
}

void fake_attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                            const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  AttentionDropout dr;
  cpu::attention_forward(fake_untag(out), fake_untag(lse), fake_untag(q), fake_untag(k), fake_untag(v),
                         fake_untag(q_pos), fake_untag(k_pos), untagged_dims(d, &dr));
}

void fake_attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                             const float* lse, const float* q, const float* k, const float* v,
                             const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  AttentionDropout dr;
  cpu::attention_backward(fake_untag(dq), fake_untag(dk), fake_untag(dv), fake_untag(dout), fake_untag(out),
                          fake_untag(lse), fake_untag(q), fake_untag(k), fake_untag(v), fake_untag(q_pos),
                          fake_untag(k_pos), untagged_dims(d, &dr));
}

void fake_dropout_rows(float* x, int64_t rows, int64_t C, const DropoutKey& k, const TokenCoords& at) {
  cpu::dropout_rows(fake_untag(x), rows, C, k, TokenCoords{fake_untag(at.seq), fake_untag(at.pos)});
}

KernelTable make_fake_table() {
  KernelTable t;
  t.name = "fake";
  t.sgemm = &Untagged<&cpu::sgemm>::call;
  t.linear_forward = &Untagged<&cpu::linear_forward>::call;
  t.linear_backward = &Untagged<&cpu::linear_backward>::call;
  t.embedding_forward = &Untagged<&cpu::embedding_forward>::call;
  t.embedding_backward = &Untagged<&cpu::embedding_backward>::call;
  t.rmsnorm_forward = &Untagged<&cpu::rmsnorm_forward>::call;
  t.rmsnorm_backward = &Untagged<&cpu::rmsnorm_backward>::call;
  t.rope_forward = &Untagged<&cpu::rope_forward>::call;
  t.rope_backward = &Untagged<&cpu::rope_backward>::call;
  t.swiglu_forward = &Untagged<&cpu::swiglu_forward>::call;
  t.swiglu_backward = &Untagged<&cpu::swiglu_backward>::call;
  t.attention_forward = &fake_attention_forward;
  t.attention_backward = &fake_attention_backward;
  t.attention_merge = &Untagged<&cpu::attention_merge>::call;
  t.cross_entropy_forward = &Untagged<&cpu::cross_entropy_forward>::call;
  t.cross_entropy_backward = &Untagged<&cpu::cross_entropy_backward>::call;
  t.dropout_rows = &fake_dropout_rows;
  t.router_forward = &Untagged<&cpu::router_forward>::call;
  t.router_backward = &Untagged<&cpu::router_backward>::call;
  t.adamw_update = &Untagged<&cpu::adamw_update>::call;
  t.sgd_update = &Untagged<&cpu::sgd_update>::call;
  t.lamb_direction = &Untagged<&cpu::lamb_direction>::call;
  t.sum_squares = &Untagged<&cpu::sum_squares>::call;
  t.exact_sum_squares = &Untagged<&cpu::exact_sum_squares>::call;
  t.vocab_lookup = &Untagged<&cpu::vocab_lookup>::call;
  t.vocab_lookup_backward = &Untagged<&cpu::vocab_lookup_backward>::call;
  t.vocab_ce_max = &Untagged<&cpu::vocab_ce_max>::call;
  t.vocab_ce_sums = &Untagged<&cpu::vocab_ce_sums>::call;
  t.vocab_ce_finish = &Untagged<&cpu::vocab_ce_finish>::call;
  t.vocab_ce_backward = &Untagged<&cpu::vocab_ce_backward>::call;
  t.add = &Untagged<&cpu::add>::call;
  t.axpy = &Untagged<&cpu::axpy>::call;
  t.scale = &Untagged<&cpu::scale>::call;
  t.fill = &Untagged<&cpu::fill>::call;
  t.copy_rows = &Untagged<&cpu::copy_rows>::call;
  t.add_rows = &Untagged<&cpu::add_rows>::call;
  t.count_nonfinite = &Untagged<&cpu::count_nonfinite>::call;
  t.split_rmsnorm_sum_squares = &Untagged<&cpu::split_rmsnorm_sum_squares>::call;
  t.split_rmsnorm_scale = &Untagged<&cpu::split_rmsnorm_scale>::call;
  t.split_rmsnorm_dot = &Untagged<&cpu::split_rmsnorm_dot>::call;
  t.split_rmsnorm_backward = &Untagged<&cpu::split_rmsnorm_backward>::call;
  t.moe_dispatch = &Untagged<&cpu::moe_dispatch>::call;
  t.moe_dispatch_backward = &Untagged<&cpu::moe_dispatch_backward>::call;
  t.moe_combine = &Untagged<&cpu::moe_combine>::call;
  t.moe_combine_backward = &Untagged<&cpu::moe_combine_backward>::call;
  t.moe_weighted_sum = &Untagged<&cpu::moe_weighted_sum>::call;
  t.moe_weighted_sum_backward = &Untagged<&cpu::moe_weighted_sum_backward>::call;
  return t;
}

}  // namespace

const KernelTable& cpu_kernels() {
  static const KernelTable t = make_cpu_table();
  return t;
}

const KernelTable& fake_kernels() {
  static const KernelTable t = make_fake_table();
  return t;
}

const KernelTable& kernels() {
  return g_table != nullptr ? *g_table : cpu_kernels();
}

void set_kernels(const KernelTable& table) {
  g_table = &table;
}

RunDevice parse_run_device(std::string_view name, std::string_view key) {
  if (name == "cpu") return RunDevice::cpu;
  if (name == "fake") return RunDevice::fake;
  if (name == "cuda") return RunDevice::cuda;
  MT_THROW(ConfigError, key, " = '", name, "': the devices are cpu, fake (for tests) and cuda");
}

const char* run_device_name(RunDevice d) {
  switch (d) {
    case RunDevice::cpu:
      return "cpu";
    case RunDevice::fake:
      return "fake";
    case RunDevice::cuda:
      break;
  }
  return "cuda";
}

void check_run_device(RunDevice d) {
  MT_REQUIRE(
      d != RunDevice::cuda, ConfigError,
      "train.device = cuda: the trainer has no CUDA kernel table yet (src/cuda's kernels are not behind "
      "the seam; docs/ARCHITECTURE.md \"The kernel seam\")");
}

void use_run_device(RunDevice d) {
  check_run_device(d);
  switch (d) {
    case RunDevice::cpu:
      set_run_allocator(host_allocator());
      set_kernels(cpu_kernels());
      return;
    case RunDevice::fake:
      set_run_allocator(fake_allocator());
      set_kernels(fake_kernels());
      return;
    case RunDevice::cuda:
      break;
  }
}

// The dispatchers: what the rest of meshtrain calls.
void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float* C, int64_t ldc, Out out) {
  kernels().sgemm(trans_a, trans_b, M, N, K, A, lda, B, ldb, C, ldc, out);
}
void linear_forward(float* out, const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC,
                    Out mode) {
  kernels().linear_forward(out, inp, weight, N, IC, OC, mode);
}
void linear_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                     int64_t N, int64_t IC, int64_t OC) {
  kernels().linear_backward(dinp, dweight, dout, inp, weight, N, IC, OC);
}
void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C) {
  kernels().embedding_forward(out, ids, table, N, C);
}
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C) {
  kernels().embedding_backward(dtable, dout, ids, N, C);
}
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                     float eps) {
  kernels().rmsnorm_forward(out, rstd, inp, weight, N, C, eps);
}
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C) {
  kernels().rmsnorm_backward(dinp, dweight, dout, inp, weight, rstd, N, C);
}
void rope_forward(float* x, const int32_t* pos, const RopeTable& table, int64_t N, int64_t n_heads,
                  int64_t row_stride) {
  kernels().rope_forward(x, pos, table, N, n_heads, row_stride);
}
void rope_backward(float* dx, const int32_t* pos, const RopeTable& table, int64_t N, int64_t n_heads,
                   int64_t row_stride) {
  kernels().rope_backward(dx, pos, table, N, n_heads, row_stride);
}
void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F) {
  kernels().swiglu_forward(out, gu, N, F);
}
void swiglu_backward(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F) {
  kernels().swiglu_backward(dgu, dout, gu, N, F);
}
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  kernels().attention_forward(out, lse, q, k, v, q_pos, k_pos, d);
}
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d) {
  kernels().attention_backward(dq, dk, dv, dout, out, lse, q, k, v, q_pos, k_pos, d);
}
void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part,
                     const AttentionDims& d) {
  kernels().attention_merge(out, lse, out_part, lse_part, d);
}
void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t N,
                           int64_t V, int32_t ignore_index) {
  kernels().cross_entropy_forward(losses, lse, logits, targets, N, V, ignore_index);
}
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            float dloss, int64_t N, int64_t V, int32_t ignore_index) {
  kernels().cross_entropy_backward(dlogits, logits, lse, targets, dloss, N, V, ignore_index);
}
void dropout_rows(float* x, int64_t rows, int64_t C, const DropoutKey& k, const TokenCoords& at) {
  kernels().dropout_rows(x, rows, C, k, at);
}
double router_forward(float* probs, float* lse, int32_t* experts, float* weights, const float* logits,
                      const float* bias, RouterDims d) {
  return kernels().router_forward(probs, lse, experts, weights, logits, bias, d);
}
void router_backward(float* dlogits, const float* dweights, const float* dprob_all, float z_scale,
                     const float* probs, const float* lse, const int32_t* experts, const float* weights,
                     RouterDims d) {
  kernels().router_backward(dlogits, dweights, dprob_all, z_scale, probs, lse, experts, weights, d);
}
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t t) {
  kernels().adamw_update(params, grads, m, v, n, lr, beta1, beta2, eps, weight_decay, t);
}
void sgd_update(float* params, const float* grads, float* buf, int64_t n, double lr, double momentum,
                bool nesterov, double weight_decay) {
  kernels().sgd_update(params, grads, buf, n, lr, momentum, nesterov, weight_decay);
}
void lamb_direction(const float* params, float* grads, float* m, float* v, int64_t n, double beta1,
                    double beta2, double eps, double weight_decay, int64_t t) {
  kernels().lamb_direction(params, grads, m, v, n, beta1, beta2, eps, weight_decay, t);
}
double sum_squares(const float* g, int64_t n) {
  return kernels().sum_squares(g, n);
}
void exact_sum_squares(ExactSum& acc, const float* g, int64_t n) {
  kernels().exact_sum_squares(&acc, g, n);
}
void vocab_lookup(float* out, const int32_t* ids, const float* table_local, int64_t N, int64_t C, int64_t V,
                  VocabRange vs) {
  kernels().vocab_lookup(out, ids, table_local, N, C, V, vs);
}
void vocab_lookup_backward(float* dtable_local, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                           int64_t V, VocabRange vs) {
  kernels().vocab_lookup_backward(dtable_local, dout, ids, N, C, V, vs);
}
void vocab_ce_max(double* max, const float* logits_local, int64_t N, VocabRange vs) {
  kernels().vocab_ce_max(max, logits_local, N, vs);
}
void vocab_ce_sums(double* sum, double* target, const float* logits_local, const int32_t* targets,
                   const double* max, int64_t N, int64_t V, int32_t ignore_index, VocabRange vs) {
  kernels().vocab_ce_sums(sum, target, logits_local, targets, max, N, V, ignore_index, vs);
}
void vocab_ce_finish(float* losses, float* lse, const double* max, const double* sum, const double* target,
                     const int32_t* targets, int64_t N, int32_t ignore_index) {
  kernels().vocab_ce_finish(losses, lse, max, sum, target, targets, N, ignore_index);
}
void vocab_ce_backward(float* dlogits_local, const float* logits_local, const float* lse,
                       const int32_t* targets, float dloss, int64_t N, int64_t V, int32_t ignore_index,
                       VocabRange vs) {
  kernels().vocab_ce_backward(dlogits_local, logits_local, lse, targets, dloss, N, V, ignore_index, vs);
}
void add(float* y, const float* x, int64_t n) {
  kernels().add(y, x, n);
}
void axpy(float* y, float a, const float* x, int64_t n) {
  kernels().axpy(y, a, x, n);
}
void scale(float* y, float a, int64_t n) {
  kernels().scale(y, a, n);
}
void fill(float* y, float value, int64_t n) {
  kernels().fill(y, value, n);
}
void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
               int64_t cols) {
  kernels().copy_rows(dst, dst_stride, src, src_stride, rows, cols);
}
void add_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
              int64_t cols) {
  kernels().add_rows(dst, dst_stride, src, src_stride, rows, cols);
}

int64_t count_nonfinite(const float* x, int64_t n) {
  return kernels().count_nonfinite(x, n);
}

}  // namespace mt

// The cpu backend's kernels: the implementations behind ops/kernels.h's `cpu`
// table (and, untagged, the fake device's). Callers outside src/ops use the
// dispatchers (ops/rmsnorm.h, ...), never these.
#pragma once

#include <cstdint>

#include "core/exact_sum.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/gemm.h"
#include "ops/moe_kernels.h"
#include "ops/rope.h"
#include "ops/router.h"
#include "ops/split_rmsnorm.h"
#include "ops/vocab_kernels.h"

namespace mt::cpu {

void sgemm(Trans trans_a, Trans trans_b, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float* C, int64_t ldc, Out out);
void linear_forward(float* out, const float* inp, const float* weight, int64_t N, int64_t IC, int64_t OC,
                    Out mode);
void linear_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                     int64_t N, int64_t IC, int64_t OC);
void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C);
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C);
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                     float eps);
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C);
void rope_forward(float* x, const int32_t* pos, const RopeTable& table, int64_t N, int64_t n_heads,
                  int64_t row_stride);
void rope_backward(float* dx, const int32_t* pos, const RopeTable& table, int64_t N, int64_t n_heads,
                   int64_t row_stride);
void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F);
void swiglu_backward(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F);
void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d);
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* out,
                        const float* lse, const float* q, const float* k, const float* v,
                        const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d);
void attention_merge(float* out, float* lse, const float* out_part, const float* lse_part,
                     const AttentionDims& d);
void cross_entropy_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t N,
                           int64_t V, int32_t ignore_index);
void cross_entropy_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                            float dloss, int64_t N, int64_t V, int32_t ignore_index);
void dropout_rows(float* x, int64_t rows, int64_t C, const DropoutKey& k, const TokenCoords& at);
double router_forward(float* probs, float* lse, int32_t* experts, float* weights, const float* logits,
                      const float* bias, RouterDims d);
void router_backward(float* dlogits, const float* dweights, const float* dprob_all, float z_scale,
                     const float* probs, const float* lse, const int32_t* experts, const float* weights,
                     RouterDims d);
void adamw_update(float* params, const float* grads, float* m, float* v, int64_t n, double lr, double beta1,
                  double beta2, double eps, double weight_decay, int64_t t);
void sgd_update(float* params, const float* grads, float* buf, int64_t n, double lr, double momentum,
                bool nesterov, double weight_decay);
void lamb_direction(const float* params, float* grads, float* m, float* v, int64_t n, double beta1,
                    double beta2, double eps, double weight_decay, int64_t t);
double sum_squares(const float* g, int64_t n);
void exact_sum_squares(ExactSum* acc, const float* g, int64_t n);

void vocab_lookup(float* out, const int32_t* ids, const float* table_local, int64_t N, int64_t C, int64_t V,
                  VocabRange vs);
void vocab_lookup_backward(float* dtable_local, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                           int64_t V, VocabRange vs);
void vocab_ce_max(double* max, const float* logits_local, int64_t N, VocabRange vs);
void vocab_ce_sums(double* sum, double* target, const float* logits_local, const int32_t* targets,
                   const double* max, int64_t N, int64_t V, int32_t ignore_index, VocabRange vs);
void vocab_ce_finish(float* losses, float* lse, const double* max, const double* sum, const double* target,
                     const int32_t* targets, int64_t N, int32_t ignore_index);
void vocab_ce_backward(float* dlogits_local, const float* logits_local, const float* lse,
                       const int32_t* targets, float dloss, int64_t N, int64_t V, int32_t ignore_index,
                       VocabRange vs);

void add(float* y, const float* x, int64_t n);
void axpy(float* y, float a, const float* x, int64_t n);
void scale(float* y, float a, int64_t n);
void fill(float* y, float value, int64_t n);
void copy_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
               int64_t cols);
void add_rows(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
              int64_t cols);
int64_t count_nonfinite(const float* x, int64_t n);
void split_rmsnorm_sum_squares(double* ss, const float* inp, int64_t N, int64_t C);
void split_rmsnorm_scale(float* out, float* rstd, const float* inp, const float* w, const double* ss,
                         int64_t N, int64_t C, int64_t d, float eps);
void split_rmsnorm_dot(double* dot, const float* dout, const float* inp, const float* w, int64_t N,
                       int64_t C);
void split_rmsnorm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            const float* rstd, const double* dot, int64_t N, int64_t C, int64_t d);

void moe_dispatch(float* xs, const float* x, const int64_t* order, int64_t R, int64_t k, int64_t C);
void moe_dispatch_backward(float* dx, const float* dxs, const int64_t* row_of, int64_t N, int64_t k,
                           int64_t C);
void moe_combine(float* yk, const float* ys, const int64_t* row_of, int64_t choices, int64_t C);
void moe_combine_backward(float* dys, const float* dyk, const int64_t* order, int64_t R, int64_t C);
void moe_weighted_sum(float* y, const float* mid, const float* w, const float* yk, int64_t N, int64_t k,
                      int64_t C);
void moe_weighted_sum_backward(float* dyk, float* dw, const float* dy, const float* w, const float* yk,
                               int64_t N, int64_t k, int64_t C);

}  // namespace mt::cpu

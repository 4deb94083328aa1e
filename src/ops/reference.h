// Naive double-precision references of the kernels in ops/: the readable
// definitions and the test oracles. Same argument grammar as the fast kernels
// (outputs first, then inputs and weights, then sizes); activation gradients
// are assigned, parameter gradients accumulated. Straight loops, no tricks:
// never call these in training.
#pragma once

#include <cstdint>

namespace mt::ref {

// out[N, OC] = inp[N, IC] · weight[OC, IC]ᵀ
void linear_forward(double* out, const double* inp, const double* weight, int64_t N, int64_t IC, int64_t OC);
// dinp[N, IC] = dout · weight (assigned); dweight[OC, IC] += doutᵀ · inp
void linear_backward(double* dinp, double* dweight, const double* dout, const double* inp,
                     const double* weight, int64_t N, int64_t IC, int64_t OC);

// out[n, :] = table[ids[n], :]
void embedding_forward(double* out, const int32_t* ids, const double* table, int64_t N, int64_t C);
// dtable[ids[n], :] += dout[n, :]
void embedding_backward(double* dtable, const double* dout, const int32_t* ids, int64_t N, int64_t C);

// out = inp · rstd · weight, rstd[n] = 1 / sqrt(mean_c(inp[n]²) + eps)
void rmsnorm_forward(double* out, double* rstd, const double* inp, const double* weight, int64_t N, int64_t C,
                     double eps);
// dinp assigned, dweight accumulated; rstd from the forward.
void rmsnorm_backward(double* dinp, double* dweight, const double* dout, const double* inp,
                      const double* weight, const double* rstd, int64_t N, int64_t C);

// Rotate-half RoPE (see ops/rope.h), in place, cos/sin computed on the fly:
// pair i of a head of dimension D turns by pos · theta^(−2i/D).
void rope_forward(double* x, const int32_t* pos, int64_t N, int64_t n_heads, int64_t head_dim,
                  int64_t row_stride, double theta);
// Transpose of rope_forward (rotation by −angle), in place.
void rope_backward(double* dx, const int32_t* pos, int64_t N, int64_t n_heads, int64_t head_dim,
                   int64_t row_stride, double theta);

// out[N, F] = silu(gu[:, :F]) · gu[:, F:]
void swiglu_forward(double* out, const double* gu, int64_t N, int64_t F);
// dgu[N, 2F] assigned
void swiglu_backward(double* dgu, const double* dout, const double* gu, int64_t N, int64_t F);

// losses[n] = log Σ_v exp(logits[n, v]) − logits[n, targets[n]] (0 when ignored); lse saved.
void cross_entropy_forward(double* losses, double* lse, const double* logits, const int32_t* targets,
                           int64_t N, int64_t V, int32_t ignore_index);
// dlogits = dloss · (softmax − onehot), assigned; zero rows when ignored.
void cross_entropy_backward(double* dlogits, const double* logits, const double* lse, const int32_t* targets,
                            double dloss, int64_t N, int64_t V, int32_t ignore_index);

}  // namespace mt::ref

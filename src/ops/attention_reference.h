// Naive double-precision attention: the definition of ops/attention.h and the
// test oracle. Materialises every score; same layouts, strides, positions and
// GQA mapping as the fast kernels (see AttentionDims).
#pragma once

#include <cstdint>

#include "ops/attention.h"

namespace mt::ref {

// out [B, Tq, out_stride] assigned, lse [B, H, Tq]; a query that sees no key
// gets out = 0 and lse = −inf.
void attention_forward(double* out, double* lse, const double* q, const double* k, const double* v,
                       const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d);

// Analytic backward with the contract of mt::attention_backward: out and lse
// are those over all key blocks; dq, dk, dv are accumulated (+=).
void attention_backward(double* dq, double* dk, double* dv, const double* dout, const double* out,
                        const double* lse, const double* q, const double* k, const double* v,
                        const int32_t* q_pos, const int32_t* k_pos, const AttentionDims& d);

}  // namespace mt::ref

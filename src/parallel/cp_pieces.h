// The canonical mode's cp pieces in the weight gradients (parallel.canonical_cp
// = C > 1; cp_canonical.h): every weight gradient is a sum over tokens, and a
// rank's N local tokens are its k = C / cp pieces, each one block of N / k rows
// (piece order). Each piece's contribution is formed apart, from zero — its own
// GEMM over its rows, or its own walk of the embedding's tokens — and the k
// leaves are summed as the canonical tree (core/exact_sum.h sum_in_tree_order)
// before they are added to the gradient; the store then sums the ranks' roots
// over dp × cp with SumOrder::tree, whose rank order (dp outer, cp inner) makes
// it the tree over microbatches of the tree over pieces. With k = 1 the plain
// kernels are that one leaf already (into the zeroed gradient), so nothing here
// runs. The norms' weight gradients use the same cut as token shards
// (linear_plan.h NormEntry::shards).
#pragma once

#include <cstdint>

namespace mt::cp {

// dw[OC, IC] += the tree over k pieces of dout_jᵀ · inp_j (rows [j·N/k, (j+1)·N/k)),
// each leaf formed in slots + j·OC·IC ([k, OC, IC] scratch).
void pieces_weight_grad(float* dw, float* slots, const float* dout, const float* inp, int64_t N, int64_t IC,
                        int64_t OC, int64_t k);

// dtable[V, C] += the tree over k pieces of each piece's embedding gradient,
// every row a piece's tokens touch summed in token order from zero.
void pieces_embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                               int64_t k);

}  // namespace mt::cp

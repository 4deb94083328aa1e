// The vocabulary-parallel embedding's and cross-entropy's local kernels
// (parallel/vocab_parallel.h runs them between its collectives): a rank holds
// the vocabulary rows [begin, end) of the table or the logits, padded to Vl.
#pragma once

#include <cstdint>

namespace mt {

struct VocabRange {
  int64_t begin = 0, end = 0;  // the rows this rank holds
  int64_t rows = 0;            // Vl: its padded row count
};

// out[n] = the row of ids[n] where this rank holds it, else 0; ids must lie in [0, V).
void vocab_lookup(float* out, const int32_t* ids, const float* table_local, int64_t N, int64_t C, int64_t V,
                  VocabRange vs);
// dtable_local[ids[n] − begin] += dout[n] for the ids this rank holds, in token order.
void vocab_lookup_backward(float* dtable_local, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                           int64_t V, VocabRange vs);
// The local row maxima of the held logits (before their all-reduce max).
void vocab_ce_max(double* max, const float* logits_local, int64_t N, VocabRange vs);
// The local Σ exp(x − max) and the target's logit where held (0 elsewhere);
// targets must lie in [0, V) or be ignore_index.
void vocab_ce_sums(double* sum, double* target, const float* logits_local, const int32_t* targets,
                   const double* max, int64_t N, int64_t V, int32_t ignore_index, VocabRange vs);
// losses and lse from the all-reduced max, sum and target.
void vocab_ce_finish(float* losses, float* lse, const double* max, const double* sum, const double* target,
                     const int32_t* targets, int64_t N, int32_t ignore_index);
// dlogits_local = dloss·(softmax − onehot) on the held columns (padding 0); may alias logits_local.
void vocab_ce_backward(float* dlogits_local, const float* logits_local, const float* lse,
                       const int32_t* targets, float dloss, int64_t N, int64_t V, int32_t ignore_index,
                       VocabRange vs);

}  // namespace mt

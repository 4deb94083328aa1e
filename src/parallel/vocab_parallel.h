// Vocab-parallel embedding and cross-entropy (Megatron VocabParallelEmbedding,
// vocab_parallel_cross_entropy). The vocabulary V is split across tp with the
// PADDED convention of mesh/layout.h: every rank holds Vl = ceil(V/tp) rows of
// the table (columns of the logits); rank t's real ones are the global
// [begin, end) = shard_range(V, tp, t), the rest (at the end of the last ranks)
// are padding that is never read into a result and never written by a backward.
//
//   embedding   table S(0) over tp; ids Replicate. Each rank looks up the ids it
//               owns (zeros elsewhere): out Partial → reduce_from_tp forward
//               (SP: scatter_to_sp forward, out S(0) tokens). Backward: each
//               rank accumulates only its own rows, no communication without SP
//               (SP: scatter_to_sp backward gathers dout first).
//   cross-entropy  logits S(last) over tp (the lm_head is column-parallel); the
//               full logits are never gathered. Three all-reduces of N values:
//               MAX of the row max, SUM of Σ exp(x − max), SUM of the target logit
//               (non-zero on the one rank that owns the target). loss = lse − x[t].
//               Backward is local: softmax − onehot on this rank's columns.
#pragma once

#include <cstdint>
#include <string_view>

#include "comm/group.h"
#include "ops/vocab_kernels.h"
#include "parallel/tensor_parallel.h"

namespace mt::tp {

// This rank's piece of the vocabulary: real global rows [begin, end), and the
// padded local row count (the same on every rank).
using VocabShard = VocabRange;  // rows = ceil(V / tp)
VocabShard vocab_shard(int64_t V, int tp, int rank);

// The lookup of one vocabulary shard without communication is
// ops/vocab_kernels.h's vocab_lookup (and its backward): the embedding's
// local half, 1-D here below and on a grid in linear_plan_exec.cpp.

// out[N, C] (SP: [N/tp, C]) = table[ids[n], :] over the whole vocabulary, where
// table_local[Vl, C] holds this rank's rows. Ids must lie in [0, V) (MT_CHECK).
// scratch [N, C] holds the partial lookup under SP (unused otherwise).
// layer.group must be set (without tp the model runs ops/embedding.h).
void vocab_embedding_forward(float* out, float* scratch, const int32_t* ids, const float* table_local,
                             int64_t N, int64_t C, int64_t V, const TpLayer& layer);

// dtable_local[ids[n] − begin, :] += dout[n, :] for the ids this rank owns, in
// token order. dout is [N, C] (SP: [N/tp, C], gathered first into scratch [N, C]).
void vocab_embedding_backward(float* dtable_local, float* scratch, const float* dout, const int32_t* ids,
                              int64_t N, int64_t C, int64_t V, const TpLayer& layer);

// losses[N] = lse[n] − logits[n, targets[n]] (0 when targets[n] == ignore_index),
// lse[N] = log Σ_{v < V} exp(logits[n, v]) saved for the backward; both the
// same on every rank. logits_local[N, Vl] is this rank's slice of the logits;
// padded columns are masked (as −inf). `site` labels the three all-reduces
// ("<site>: vocab_ce max|sumexp|target forward"). Targets must lie in [0, V)
// or be the ignore index.
void vocab_cross_entropy_forward(float* losses, float* lse, const float* logits_local, const int32_t* targets,
                                 int64_t N, int64_t V, int32_t ignore_index, Group& tp,
                                 std::string_view site);

// dlogits_local[N, Vl] = dloss · (softmax(logits[n]) − onehot(targets[n])) on this
// rank's columns, assigned; zero rows for ignored targets and zero padded
// columns. No communication. May run in place (dlogits_local == logits_local).
void vocab_cross_entropy_backward(float* dlogits_local, const float* logits_local, const float* lse,
                                  const int32_t* targets, float dloss, int64_t N, int64_t V,
                                  int32_t ignore_index, Group& tp);

}  // namespace mt::tp

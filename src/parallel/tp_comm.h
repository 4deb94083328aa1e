// The conjugate communication pairs of tensor parallelism (Megatron's
// mappings.py, picotron's tp_communications.py). Each pair is two free
// functions, forward and backward, over the tp Group; the backward of each is
// the transpose of its forward, which is what keeps hand-written backward
// passes right. In the vocabulary of mesh/layout.h (placements over tp):
//
//   pair            forward                         backward
//   copy_to_tp      identity   R → R (fans out)     all-reduce  P → R
//   reduce_from_tp  all-reduce P → R                identity    R → R
//   gather_from_sp  all-gather S(0) → R             reduce-scatter P → S(0)
//   scatter_to_sp   reduce-scatter P → S(0)         all-gather  S(0) → R
//
// copy_to_tp sits in front of a column-parallel layer (every rank reads the same
// input, so the input's gradient is the SUM of the ranks' contributions, not
// their mean: docs/PARALLELISM.md, "Tensor parallelism"). reduce_from_tp sits after a row-parallel layer.
// The _sp pairs replace them under sequence parallelism (Megatron SP): the
// activations between TP regions are sharded along the token dim.
//
// Token dim: activations are row-major [N, C] with N = B·T tokens; sequence
// parallelism shards dim 0, rank t of tp holding tokens [t·N/tp, (t+1)·N/tp).
// N must be divisible by tp (ConfigError with the numbers otherwise).
//
// Ledger labels: `site` names the call site ("layer 3 mlp down"); the recorded
// label is "<site>: <pair> forward|backward [shape]" ("layer 3 mlp down:
// reduce_from_tp forward [512, 64]"), where shape is that of the tensor this
// rank sends (the ledger's element count): the whole tensor for an all-reduce
// and a reduce-scatter, this rank's block for an all-gather. --explain prints
// it. Identity halves record nothing. Every function is collective over
// tp unless it is an identity.
//
// Every sum here (copy_to_tp and gather_from_sp backward, reduce_from_tp and
// scatter_to_sp forward) is the rank-ordered SumOrder::ranks of comm/group.h,
// so that parallel.tp_overlap's chunked sums (tp_overlap.h) give the same bits
// (docs/PARALLELISM.md "Overlapping TP communication").
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include "comm/group.h"

namespace mt::tp {

// "<site>: <pair> <direction> [d0, d1, …]" (no brackets for an empty shape)
std::string comm_label(std::string_view site, std::string_view pair, std::string_view direction,
                       std::initializer_list<int64_t> shape = {});

// copy_to_tp. forward: identity on x[rows, cols] (no communication; kept so that
// the call site reads as the pair). backward: dx ← Σ_tp dx, in place.
void copy_to_tp_forward(const float* x, int64_t rows, int64_t cols, Group& tp, std::string_view site);
void copy_to_tp_backward(float* dx, int64_t rows, int64_t cols, Group& tp, std::string_view site);

// reduce_from_tp. forward: x[rows, cols] ← Σ_tp x, in place. backward: identity on dx.
void reduce_from_tp_forward(float* x, int64_t rows, int64_t cols, Group& tp, std::string_view site);
void reduce_from_tp_backward(const float* dx, int64_t rows, int64_t cols, Group& tp, std::string_view site);

// gather_from_sp (N = all tokens, C = row width).
// forward:  out[N, C] ← the ranks' inp[N/tp, C] in rank order (all-gather).
// backward: dinp[N/tp, C] = Σ_tp dout[N, C] rows of this rank (reduce-scatter), assigned.
void gather_from_sp_forward(float* out, const float* inp, int64_t N, int64_t C, Group& tp,
                            std::string_view site);
void gather_from_sp_backward(float* dinp, const float* dout, int64_t N, int64_t C, Group& tp,
                             std::string_view site);

// scatter_to_sp.
// forward:  out[N/tp, C] = Σ_tp inp[N, C] rows of this rank (reduce-scatter; inp is Partial).
// backward: dinp[N, C] ← the ranks' dout[N/tp, C] in rank order (all-gather), assigned.
void scatter_to_sp_forward(float* out, const float* inp, int64_t N, int64_t C, Group& tp,
                           std::string_view site);
void scatter_to_sp_backward(float* dinp, const float* dout, int64_t N, int64_t C, Group& tp,
                            std::string_view site);

// N / tp, after checking that tp divides N ("tokens (10) must be divisible by tp (4) ...").
int64_t sp_local_tokens(int64_t N, const Group& tp);

// The start-up rule of sequence parallelism (parallel.sp = true), checked by
// Config::validate and by the model: it needs tp > 1, and each rank's tokens of
// a sequence, seq_len / cp (cp = 1 without context parallelism, which must
// already divide seq_len), must be divisible by tp, so that every sequence's
// rows split evenly. ConfigError naming the numbers otherwise.
void check_sequence_parallel(int64_t seq_len, int64_t cp, int64_t tp);

}  // namespace mt::tp

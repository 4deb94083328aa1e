// Tensor-parallel (Megatron) linear layers: the layer math the model runs.
// The communication is the conjugate pairs of tp_comm.h, called at the layer's
// edges; how each weight is split is the plan table of tp_plan.h.
//
// Weights are [out, in] like PyTorch (ops/gemm.h), so with tp ranks:
//   column-parallel  W split on dim 0 (output features): rank t holds rows
//                    [t·OC/tp, (t+1)·OC/tp) as weight[OCl, IC], OCl = OC/tp.
//                    input Replicate → output Shard(last dim); no forward
//                    communication, backward all-reduces dinp (copy_to_tp).
//   row-parallel     W split on dim 1 (input features): rank t holds columns
//                    [t·IC/tp, (t+1)·IC/tp) as weight[OC, ICl], ICl = IC/tp.
//                    input Shard(last dim) → output Partial → all-reduce
//                    forward (reduce_from_tp); backward needs no communication.
// A column layer feeding a row layer (MLP gate|up → down, q|k|v → attention → o)
// keeps the wide hidden activation sharded: one all-reduce forward (after the
// row layer) and one backward (before the column layer's input),
// docs/PARALLELISM.md "Tensor parallelism".
//
// Sequence parallelism (SequenceParallel::on): outside the pair the tokens are
// sharded, S(0) over tp; the column layer all-gathers its input (gather_from_sp)
// and the row layer reduce-scatters its output (scatter_to_sp), and the
// backward does the transposes. N is then the FULL token count, divisible by tp.
//
// Without a tp group (TpLayer::group null or of size 1) every function is the
// plain linear layer of ops/gemm.h, with no communication.
//
// Argument grammar (llm.c): outputs and saved tensors first, then caller-owned
// scratch, then inputs and weights, then sizes, then the layer. Nothing here
// allocates. Parameter gradients accumulate (+=) and are this rank's slice of
// the full weight's gradient (no tp communication: tp ranks hold different
// shards); activation gradients are assigned.
#pragma once

#include <cstdint>
#include <string_view>

#include "comm/group.h"

namespace mt::tp {

enum class SequenceParallel { off, on };
// on: the GEMMs next to a collective run in token chunks, each chunk's
// collective in flight while the next chunk multiplies (tp_overlap.h); the
// result is bitwise that of off.
enum class Overlap { off, on };

// Where a TP layer runs: its group (null: no tensor parallelism), the ledger
// site ("layer 3 mlp down") and whether the activations outside the TP region
// are sequence-sharded (only meaningful with a group).
struct TpLayer {
  Group* group = nullptr;
  std::string_view site;
  SequenceParallel sp = SequenceParallel::off;
  Overlap overlap = Overlap::off;

  bool on() const { return group != nullptr && group->size() > 1; }
  bool sp_on() const { return on() && sp == SequenceParallel::on; }
  bool overlap_on() const { return on() && overlap == Overlap::on; }
};

// Column-parallel forward. out[N, OCl] = x[N, IC] · weight[OCl, IC]ᵀ, where x is
//   SP off: inp[N, IC] (Replicate; copy_to_tp forward);   inp_full unused (may be null);
//   SP on:  inp[N/tp, IC] gathered into inp_full[N, IC] (gather_from_sp forward), saved.
// Returns x, the input the GEMM read (the backward's gemm_inp).
const float* column_parallel_forward(float* out, float* inp_full, const float* inp, const float* weight,
                                     int64_t N, int64_t IC, int64_t OCl, const TpLayer& layer);

// Rows of a column-parallel weight that several tp ranks hold alike (kv heads
// when tp > n_kv_heads): their gradient is partial on each rank and is summed
// over `group` (the ranks sharing them) before it joins dweight. scratch holds
// count × row_size floats.
struct ReplicatedRows {
  Group* group = nullptr;  // null: none
  int64_t first = 0, count = 0, row_size = 0;
  float* scratch = nullptr;
  std::string_view site;
};

// Column-parallel backward. gemm_inp is the [N, IC] input the forward's GEMM read.
//   dweight: [OCl, IC] += dout[N, OCl]ᵀ · gemm_inp, first (null: skipped); rows
//            in `replicated` are summed over its group.
//   dinp:    SP off [N, IC], SP on [N/tp, IC]; assigned, after the sum over tp
//            (copy_to_tp / gather_from_sp backward). Null: skipped, with its
//            collective (every rank of tp must pass null alike).
//   scratch: [N, IC], holds this rank's partial dinp under SP (unused otherwise).
void column_parallel_backward(float* dinp, float* dweight, float* scratch, const float* dout,
                              const float* gemm_inp, const float* weight, int64_t N, int64_t IC, int64_t OCl,
                              const TpLayer& layer, const ReplicatedRows& replicated = {});

// Row-parallel forward. The partial sum inp[N, ICl] · weight[OC, ICl]ᵀ is reduced to
//   SP off: out[N, OC]    (reduce_from_tp forward: all-reduce);
//   SP on:  out[N/tp, OC] (scatter_to_sp forward: reduce-scatter).
// With `resid` (same shape as out) the output is resid + that sum, the residual
// add fused (without tp: one GEMM accumulating onto a copy of resid).
// scratch: [N, OC], the partial sum under tp when it cannot be formed in out
// (SP, or a residual); unused otherwise.
void row_parallel_forward(float* out, float* scratch, const float* inp, const float* weight, int64_t N,
                          int64_t ICl, int64_t OC, const TpLayer& layer, const float* resid = nullptr);

// Row-parallel backward. dout is SP off [N, OC] (Replicate), SP on [N/tp, OC]
// (gathered first into scratch [N, OC]: scatter_to_sp backward).
//   dinp:    [N, ICl] = dout · weight, assigned, stays sharded (no communication).
//   dweight: [OC, ICl] += doutᵀ · inp. Either may be null.
void row_parallel_backward(float* dinp, float* dweight, float* scratch, const float* dout, const float* inp,
                           const float* weight, int64_t N, int64_t ICl, int64_t OC, const TpLayer& layer);

}  // namespace mt::tp

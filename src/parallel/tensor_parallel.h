// Tensor-parallel (Megatron) linear layers and the plan that says how each
// weight is split. Layer math only: the communication is the conjugate pairs of
// tp_comm.h, called at the layer's edges.
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
// A column layer feeding a row layer (MLP up/gate → down, QKV → attention → o)
// keeps the wide hidden activation sharded: one all-reduce forward (after the
// row layer) and one backward (before the column layer's input), seed 000 §4.
//
// Sequence parallelism (SequenceParallel::on): outside the pair the tokens are
// sharded, S(0) over tp; the column layer all-gathers its input (gather_from_sp)
// and the row layer reduce-scatters its output (scatter_to_sp), and the
// backward does the transposes. N is then the FULL token count, divisible by tp.
//
// Argument grammar (llm.c): outputs and saved tensors first, then inputs and
// weights, then sizes, then the layer. Parameter gradients accumulate (+=) and
// are this rank's slice of the full weight's gradient (no tp communication:
// tp ranks hold different shards); activation gradients are assigned.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "comm/group.h"
#include "mesh/layout.h"

namespace mt::tp {

enum class SequenceParallel { off, on };

// Where a TP layer runs: its group, the ledger site ("layer 3 mlp down") and
// whether the activations outside the TP region are sequence-sharded.
struct TpLayer {
  Group& group;
  std::string_view site;
  SequenceParallel sp = SequenceParallel::off;
};

// Column-parallel forward. out[N, OCl] = x[N, IC] · weight[OCl, IC]ᵀ, where x is
//   SP off: inp[N, IC] (Replicate; copy_to_tp forward);   inp_full unused (may be null);
//   SP on:  inp[N/tp, IC] gathered into inp_full[N, IC] (gather_from_sp forward), saved.
void column_parallel_forward(float* out, float* inp_full, const float* inp, const float* weight, int64_t N,
                             int64_t IC, int64_t OCl, const TpLayer& layer);

// Column-parallel backward. gemm_inp is the [N, IC] input the forward's GEMM read
// (inp without SP, inp_full with SP).
//   dinp:    SP off [N, IC], SP on [N/tp, IC]; assigned, after the sum over tp
//            (copy_to_tp / gather_from_sp backward). Null: skipped, with its
//            collective (every rank of tp must pass null alike).
//   dweight: [OCl, IC] += dout[N, OCl]ᵀ · gemm_inp. Null: skipped.
void column_parallel_backward(float* dinp, float* dweight, const float* dout, const float* gemm_inp,
                              const float* weight, int64_t N, int64_t IC, int64_t OCl, const TpLayer& layer);

// Row-parallel forward. The partial sum inp[N, ICl] · weight[OC, ICl]ᵀ is reduced to
//   SP off: out[N, OC]    (reduce_from_tp forward: all-reduce, in place in out);
//   SP on:  out[N/tp, OC] (scatter_to_sp forward: reduce-scatter of an [N, OC] temporary).
void row_parallel_forward(float* out, const float* inp, const float* weight, int64_t N, int64_t ICl,
                          int64_t OC, const TpLayer& layer);

// Row-parallel backward. dout is SP off [N, OC] (Replicate), SP on [N/tp, OC]
// (gathered first: scatter_to_sp backward).
//   dinp:    [N, ICl] = dout · weight, assigned, stays sharded (no communication).
//   dweight: [OC, ICl] += doutᵀ · inp. Either may be null.
void row_parallel_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                           const float* weight, int64_t N, int64_t ICl, int64_t OC, const TpLayer& layer);

// ---- The plan: how a full weight maps to the ranks' shards ----

enum class Split { column, row };  // shard dim 0 (output features) or dim 1 (input features) of [out, in]

// A weight's split. `blocks` are the sizes of fused blocks along the split dim
// (gate|up: {F, F}; q|k|v: {H·D, KV·D, KV·D}); each block is split across tp on
// its own and a rank's pieces are stacked in block order, so the local fused
// GEMM produces [gate_t | up_t]. Empty = one block (the whole dim).
struct WeightSplit {
  Split split = Split::column;
  std::vector<int64_t> blocks;
};

// Layout of the full [rows, cols] weight over tp: Shard(0) or Shard(1).
Layout weight_layout(int64_t rows, int64_t cols, Split split);

// Shape of rank's shard: [rows/tp, cols] or [rows, cols/tp]. Throws ConfigError
// unless tp divides every block ("gate|up block 1 (10) must be divisible by tp (4)").
std::vector<int64_t> shard_shape(int64_t rows, int64_t cols, const WeightSplit& ws, int tp);

// Rank `rank`'s shard of the full row-major weight[rows, cols] (for tests and
// checkpoint loading), and the inverse: write the shard into `full` (the shards
// of every rank reassemble the weight; used to check gradients and to save).
std::vector<float> shard_weight(const float* full, int64_t rows, int64_t cols, const WeightSplit& ws,
                                int rank, int tp);
void unshard_weight(float* full, const float* shard, int64_t rows, int64_t cols, const WeightSplit& ws,
                    int rank, int tp);

// The Llama plan table (torchtitan's parallelize.py, as data): Hugging Face
// name suffix → role. Norm weights are Replicate; under SP their activations
// are sequence-sharded. Embedding and lm_head are vocab-parallel (vocab_parallel.h).
enum class Role { column, row, vocab, replicate };
struct PlanRow {
  std::string_view suffix;  // "mlp.down_proj.weight"
  Role role;
  std::string_view activation;  // the activation this weight produces, over tp
};
const std::vector<PlanRow>& llama_plan();
const char* role_name(Role r);  // "column", "row", "vocab", "replicate"

}  // namespace mt::tp

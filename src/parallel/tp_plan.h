// The tensor-parallel plan: how each parameter of the model is split over tp,
// as data (torchtitan's parallelize.py as a table). One table, read by the
// parameter table (model/params.cpp: each parameter's local shape and map onto
// the full tensor), initialisation slices, checkpoint gathering, and the
// labels that name each parameter's role.
//
// Weights are [out, in] like PyTorch, so
//   column         dim 0 split evenly: rank t holds rows [t·R/tp, (t+1)·R/tp)
//   row            dim 1 split evenly: rank t holds columns [t·K/tp, (t+1)·K/tp)
//   kv_replicated  column-parallel by kv heads; with tp > n_kv_heads each kv
//                  head is held whole by the tp / n_kv_heads ranks whose query
//                  heads use it (their gradients are summed over those ranks)
//   vocab          dim 0 split with the padded rule of mesh/layout.h
//                  (ceil(V/tp) rows, the last ones padding)
//   replicated     every rank holds the whole tensor
//
// On a 2-D grid (parallel/tp2d.h, R > 1) every matrix is split on both dims,
// one over each sub-axis, and a norm weight by features over all of tp:
// tp2d_slice below, the table of docs/PARALLELISM.md "2-D tensor parallelism".
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/group.h"
#include "mesh/layout.h"
#include "parallel/tp2d.h"

namespace mt {

// How a local parameter lies in the full one.
enum class ShardMap {
  whole,  // the full tensor (replicated)
  rows,   // local row r is global row first + r for r < count; rows ≥ count are padding (zero)
  cols,   // local column c is global column first + c; count columns
  block,  // rows as `rows` (padding included), and local column c is global
          // column col_first + c (col_count columns): a piece of a 2-D grid
};

namespace tp {

enum class Role { column, row, vocab, replicated, kv_replicated };
const char* role_name(Role r);  // "column", "row", "vocab", "replicated", "kv-replicated"

struct PlanRow {
  std::string_view suffix;  // of the Hugging Face name: "mlp.down_proj.weight"
  Role role;
  std::string_view activation;  // the activation this weight produces, over tp
  // The call site that names this weight's collectives in the comm ledger and
  // --explain ("mlp down"; "layer 3 mlp down" inside decoder layer 3).
  std::string_view site;
};
const std::vector<PlanRow>& llama_plan();
// The row whose suffix ends `hf_name`; ConfigError naming it when none does.
const PlanRow& plan_row(std::string_view hf_name);
// The ledger site of the weight `suffix` in decoder layer `layer`:
// layer_site(3, "mlp.down_proj.weight") = "layer 3 mlp down".
std::string layer_site(int64_t layer, std::string_view suffix);

// This rank's piece of a parameter of shape `global` ([rows, cols] or [n]).
struct TpSlice {
  ShardMap map = ShardMap::whole;
  int64_t first = 0, count = 0;  // see ShardMap
  int64_t extent = 0;            // local rows (rows, block) or columns (cols), padding included
  // Ranks holding this same piece (1 for a true shard; tp when replicated).
  int holders = 1;
  int64_t col_first = 0, col_count = 0;  // block only: its columns
  std::vector<int64_t> local_shape(std::vector<int64_t> global) const;
};
// ConfigError with the numbers when tp does not split the dim evenly (column,
// row), or neither of tp and the kv head count divides the other. head_dim:
// rows per kv head (kv_replicated only).
// ConfigError unless 0 <= rank < tp (tp >= 1): a rank of a tp group.
void check_tp_rank(int tp, int rank);

TpSlice tp_slice(Role role, const std::vector<int64_t>& global, int tp, int rank, int64_t head_dim = 1);

// Tp rank `rank`'s piece, at (r, c) = (rank / C, rank % C), of a parameter on
// an R × C grid with R > 1 (docs/PARALLELISM.md "2-D tensor parallelism"),
// every piece held by one rank:
//   column, kv_replicated  [out, in]: out block c of C, in block r of R (block)
//   row                    [out, in]: out block r of R, in block c of C (block)
//   vocab                  [V, d]: the padded vocab rows of tp_c rank c, d block r of R (block)
//   replicated             a [d] norm weight: feature block rank of R·C (rows);
//                          a replicated matrix (the MoE router or experts) has no 2-D split
// ConfigError with the numbers when a sub-axis does not split its dim evenly.
TpSlice tp2d_slice(Role role, const std::vector<int64_t>& global, const tp2d::Grid& grid, int rank);

// The layout over tp of a parameter with this role: Shard(0), Shard(1) or
// Replicate; a kv head replicated on `holders` ranks (TpSlice::holders) is
// Shard(0) with that many tp ranks per piece (Layout::replicas).
Layout tp_layout(Role role, std::vector<int64_t> global, int holders = 1);

// The same on an R × C grid (tp2d_slice's pieces as a Layout, for saves,
// checkpoints and --explain): column, kv_replicated and vocab Shard(0) over
// tp_c with dim 1 over tp_r; row Shard(1) over tp_c with dim 0 over tp_r; a
// norm weight Shard(0) over all of tp (block t = r·C + c). R = 1: tp_layout.
Layout tp2d_layout(Role role, std::vector<int64_t> global, const tp2d::Grid& grid);

// How many tp ranks hold the same kv heads: tp / n_kv_heads when tp >
// n_kv_heads (ConfigError unless it divides), else 1. The mesh's sub-axis tp_kv
// (mesh/sub_axes.h) is built from it: blocks of that many adjacent tp ranks,
// over which a replicated kv head's gradient is summed.
int kv_replicas(int tp, int64_t n_kv_heads);

// Calls f(local_begin, global_begin, n) for each run of the local elements
// [first, first + n) of a piece (local shape `cols` columns, full tensor
// `gcols` columns) that is also consecutive in the full tensor; padding is skipped.
template <class F>
void for_each_run(const TpSlice& s, int64_t cols, int64_t gcols, int64_t numel, int64_t first, int64_t n,
                  F&& f) {
  const bool by_row = s.map == ShardMap::cols || s.map == ShardMap::block;
  const int64_t run = by_row ? cols : numel;  // a row, or everything
  for (int64_t i = first; i < first + n;) {
    const int64_t end = std::min(first + n, (i / run + 1) * run);
    if (s.map == ShardMap::rows || s.map == ShardMap::block) {
      const int64_t real_end = std::min(end, s.count * cols);
      const int64_t col0 = s.map == ShardMap::block ? s.col_first : 0;
      if (i < real_end) f(i, (s.first + i / cols) * gcols + col0 + i % cols, real_end - i);
    } else if (s.map == ShardMap::cols) {
      f(i, (i / cols) * gcols + s.first + i % cols, end - i);
    } else {
      f(i, i, end - i);
    }
    i = end;
  }
}

// ---- weights given whole (tests, checkpoints) ----

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
// unless tp divides every block ("output features of block 1 (10) must be divisible by tp (4)").
std::vector<int64_t> shard_shape(int64_t rows, int64_t cols, const WeightSplit& ws, int tp);

// Rank `rank`'s shard of the full row-major weight[rows, cols], and the
// inverse: write the shard into `full` (the shards of every rank reassemble
// the weight). Each block is cut by tp_slice, the rule the model's parameters use.
std::vector<float> shard_weight(const float* full, int64_t rows, int64_t cols, const WeightSplit& ws,
                                int rank, int tp);
void unshard_weight(float* full, const float* shard, int64_t rows, int64_t cols, const WeightSplit& ws,
                    int rank, int tp);

}  // namespace tp
}  // namespace mt

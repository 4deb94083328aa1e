// The layer math of 2-D tensor parallelism over an R × C grid of the tp ranks
// (docs/PARALLELISM.md "2-D tensor parallelism"; the grid is parallel/tp2d.h's).
// Every linear layer is one GEMM between a conjugate pair on each sub-axis:
//
//   pair                 forward                          backward
//   gather_features      all-gather over `gather` along    reduce-scatter over `gather`
//                        the features: [N, b] → [N, g·b]   of the input gradient
//   scatter_features     reduce-scatter over `scatter`     all-gather over `scatter`
//                        along the features (Partial →     of the output gradient
//                        this rank's feature block)
//
// A "row-in" layer (q|k|v, gate|up, whose in-dim is split over tp_r) gathers
// over tp_c and scatters over tp_r; a "col-in" layer (o, down: in-dim over
// tp_c) gathers over tp_r and scatters over tp_c. One function serves both,
// with the two groups passed in that order.
//
// Feature blocks: an activation [N, k] whose features are split over a group
// of g ranks is held as rank j's part [N, k/g]. With fused blocks (q|k|v:
// {Q, K, K}; gate|up: {F, F}) rank j's part is the j-th g-th of EACH block,
// stacked in block order, so that the fused layout survives the split (the
// rule of tp_plan.h's WeightSplit). Collectives need contiguous blocks, so the
// [N, k] side is packed into (or unpacked from) g rank-major [N, k/g] slabs.
//
// Argument grammar as tensor_parallel.h: outputs and saved tensors first, then
// scratch, then inputs and weights, then sizes; parameter gradients accumulate,
// activation gradients are assigned. Every function is collective over the
// groups it names.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "comm/group.h"
#include "parallel/tp2d.h"

namespace mt::tp2d {

// The two sub-axis groups, tp rank t = r·C + c: tp_c holds the ranks of grid
// row r (size C), tp_r those of grid column c (size R). The mesh builds them
// (DeviceMesh::sub_group, mesh/sub_axes.h).

// Sizes of fused blocks along a feature dim; empty = one block of all `k` features.
using Blocks = std::vector<int64_t>;

// out[N, k] ← every rank's inp[N, k/g] of `g` (all-gather, unpacked by blocks).
// scratch: N·k floats.
void gather_features(float* out, float* scratch, const float* inp, int64_t N, int64_t k, const Blocks& blocks,
                     Group& g, std::string_view label);
// out[N, k/g] = Σ_g inp[N, k], this rank's features (packed, then reduce-scatter).
// scratch: N·k floats.
void scatter_features(float* out, float* scratch, const float* inp, int64_t N, int64_t k,
                      const Blocks& blocks, Group& g, std::string_view label);
// The same with the ranks' parts summed by SumOrder::tree (the canonical mode, canonical_tp_grid.h).
void scatter_features_tree(float* out, float* scratch, const float* inp, int64_t N, int64_t k,
                           const Blocks& blocks, Group& g, std::string_view label);

// One 2-D linear layer: this rank's block w[OCl, ICl] of the full W [OC, IC],
// OC split over the sub-axis the input is gathered over and IC over the one
// the output is scattered over (docs/PARALLELISM.md). ICl, OCl are the local
// GEMM's sizes: the gathered input's width and the output's before its
// reduce-scatter.
struct Linear2d {
  Group* gather = nullptr;   // the input's feature split: all-gathered before the GEMM
  Group* scatter = nullptr;  // the GEMM's output is Partial over it: reduce-scattered after
  Blocks out_blocks;         // fused blocks of the GEMM's output [N, OCl] (empty: one)
  std::string_view site;     // ledger site ("layer 3 mlp gate")
};

// x_full[N, ICl] ← gather(inp[N, ICl/|gather|]) (saved for the backward);
// out[N, OCl/|scatter|] = scatter(x_full · wᵀ). scratch: N·max(ICl, OCl) + N·OCl floats.
void linear2d_forward(float* out, float* x_full, float* scratch, const float* inp, const float* w, int64_t N,
                      int64_t ICl, int64_t OCl, const Linear2d& layer);

// dout[N, OCl/|scatter|] → gathered dfull[N, OCl]; dw[OCl, ICl] += dfullᵀ · x_full;
// dinp[N, ICl/|gather|] = reduce-scatter over `gather` of dfull · w.
// scratch: N·OCl + N·ICl + N·max(ICl, OCl) floats.
void linear2d_backward(float* dinp, float* dw, float* scratch, const float* dout, const float* x_full,
                       const float* w, int64_t N, int64_t ICl, int64_t OCl, const Linear2d& layer);

// RMSNorm of rows whose features are split over `tp` (each rank dl of d):
// the sums of squares, and in the backward the sums Σ w·g·x, are all-reduced
// over tp ([N] floats each). out[N, dl], rstd[N]; dinp assigned, dw[dl] += (complete:
// every rank holds different features).
void rmsnorm2d_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t dl,
                       int64_t d, float eps, Group& tp, std::string_view site);
void rmsnorm2d_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                        const float* rstd, int64_t N, int64_t dl, int64_t d, Group& tp,
                        std::string_view site);

}  // namespace mt::tp2d

// The canonical mode under 2-D tensor parallelism (docs/PARALLELISM.md "The
// canonical mode", rule 3, "2-D"): an R × C grid splits a second dim, the
// model width d, over tp_r (the K of q|k|v, gate|up and the head; the output
// of o and down) and over all of tp (the residual stream and the norms' sums
// over d). A second grain fixes those sums: g = parallel.canonical_tp_d cuts d
// into g pieces of d / g, piece q being what tp rank q holds of the residual
// stream at tp = g (and block q / (g / R) over tp_r of a weight's d dim).
//
// Every linear site's weight [OC, IC] is then cut on both dims: the heads /
// hidden / vocabulary dim into c = parallel.canonical_tp pieces (per fused
// block, as in canonical_tp.h) and d into g pieces. Each product runs once
// per (out piece, in piece) with the same (M, N, K) in every layout, one
// process included; every sum over in pieces (the forward) and over out
// pieces (the input gradient) is the canonical tree over the pieces: a rank
// sums its aligned block (sum_in_tree_order), and the reduce-scatter (or the
// head's all-reduce) over the sub-axis that splits the summed dim combines
// the ranks' roots with SumOrder::tree. The all-gathers are copies. The RMS
// norm's Σx² and its backward's Σ w·g·x over d are sums over the g d pieces
// (each piece's in feature order, in double), the tree over the rank's
// g / tp pieces, then the tree over tp. The norms' weight gradients sum over
// all N tokens on every layout (the grid splits no tokens).
//
// One process (no groups) with g > 1 runs the same pieces: it is the
// reference. 1-D tp with g > 1 is refused (its residual stream is not split).
// The scratch: (L + 3) · N · W floats, L the most pieces a rank sums, W the
// widest local side of a site (pieces2d_scratch_floats).
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "comm/group.h"

namespace mt::tp {

// One linear site's cut on this rank.
struct Pieces2d {
  int64_t out = 1, in = 1;      // this rank's pieces of the weight's output and input dims
  std::vector<int64_t> blocks;  // the output's fused blocks (local widths; empty: one)
  Group* gather = nullptr;      // the input's feature split (all-gathered forward); null: none
  Group* scatter = nullptr;     // the output's (reduce-scattered forward, by the tree); null: none
  Group* reduce = nullptr;      // the head: its logits all-reduced by the tree over it; null: none
  std::string_view site;
  float* scratch = nullptr;  // pieces2d_scratch_floats
};

int64_t pieces2d_scratch_floats(int64_t N, int64_t widest, int64_t most_pieces);

// x[N, IC] ← gather(inp) (null gather: inp itself; saved: where the gather
// lands, kept for the backward); out = the tree over in pieces of x · wᵀ,
// then reduce-scattered over `scatter` (or all-reduced over `reduce`), plus
// resid (out's shape) when given. IC, OC: the local GEMM's widths.
void pieces2d_forward(float* out, float* saved, const float* inp, const float* w, int64_t N, int64_t IC,
                      int64_t OC, const Pieces2d& p, const float* resid = nullptr);
// dout gathered over `scatter`; dw [OC, IC] += per (out, in) piece (null:
// skipped); dinp = the tree over out pieces, reduce-scattered over `gather`
// (null dinp: skipped). x: the forward's (gathered) input.
void pieces2d_backward(float* dinp, float* dw, const float* dout, const float* x, const float* w, int64_t N,
                       int64_t IC, int64_t OC, const Pieces2d& p);

// RMSNorm of rows whose d features are `pieces` d pieces here (dl of d),
// the sums over d in the tree over pieces and then over `tp` (null: one
// process holding all of d).
void pieces2d_norm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t dl,
                           int64_t d, float eps, int64_t pieces, Group* tp, std::string_view site);
void pieces2d_norm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            const float* rstd, int64_t N, int64_t dl, int64_t d, int64_t pieces, Group* tp,
                            std::string_view site);

}  // namespace mt::tp

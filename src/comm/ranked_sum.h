// Sums in a fixed rank order, built from the transport's exchanges rather than
// its reductions (comm/ only; Group's SumOrder::ranks and SumOrder::tree forms
// call these through Backend's *_ordered, whose defaults they are).
// SumOrder::tree is the same exchange with the blocks summed as the canonical
// tree over ranks (core/exact_sum.h) instead of the left fold below.
//
// A transport's all-reduce may regroup a sum by message size (Open MPI sums 4
// ranks as (x0 + x1) + (x2 + x3) for small messages and in ring order for large
// ones), so the same elements reduced whole or in chunks can round differently.
// Here every element is summed as ((x0 + x1) + x2) + … + x(P−1) whatever the
// count, which is what lets tensor parallelism chunk its collectives and stay
// bitwise (docs/PARALLELISM.md, "Overlapping TP communication"). With 2 ranks
// it is x0 + x1, the one sum any transport can form (IEEE addition commutes).
//
//   all-reduce:     all_to_allv of P near-equal element blocks (block j to rank
//                   j), the rank-order sum of this rank's block, and the summed
//                   block sent to every other rank (point to point, tagged per
//                   call: see ranked_sum.cpp): the volume of a ring all-reduce,
//                   2·(P−1)/P·count elements sent per rank.
//   reduce-scatter: all_to_all of the P blocks, then the rank-order sum.
// Only ReduceOp::sum over f32 or f64 (the caller checks).
#pragma once

#include <cstdint>
#include <memory>

#include "comm/backend.h"

namespace mt {

// dst[k] = ((parts[0·n + k] + parts[1·n + k]) + …) + parts[(ranks−1)·n + k], k < n.
void sum_in_rank_order(void* dst, const void* parts, int ranks, int64_t n, ElemType type);
// The same parts summed in `order` (ranks: the left fold above; tree: the canonical tree).
void sum_in_order(void* dst, const void* parts, int ranks, int64_t n, ElemType type, SumOrder order);

std::unique_ptr<PendingOp> ranked_all_reduce(Backend& b, void* buf, int64_t count, ElemType type,
                                             SumOrder order = SumOrder::ranks);
std::unique_ptr<PendingOp> ranked_reduce_scatter(Backend& b, const void* send, void* recv, int64_t count,
                                                 ElemType type, SumOrder order = SumOrder::ranks);

}  // namespace mt

// --explain: every collective of one step, rank by rank, with its axis, tensor
// shape, element count and call site — the table of docs/PARALLELISM.md "--explain", read from the comm
// ledger of a real run instead of written by hand.
//
//   rank 3: 2 collectives in step 0
//   rank 3 | tp | all_reduce     | [8, 64] | 512 elements | layer 0 attn o: reduce_from_tp forward
//   rank 3 | dp | reduce_scatter | [1536] | 1536 elements | layer 0 grads
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "comm/context.h"
#include "comm/group.h"

namespace mt {

// This rank's lines for the ledger entries of `step`, in call order, after a
// header line "rank R: N collectives in step S". The shape column is the
// bracketed shape at the end of an entry's label ("… forward [8, 64]"; the tp
// layers put it there), printed without it in the label column; a label
// without one gets "[elements]". Every line ends with '\n'. Pure: no communication.
std::string explain_lines(const CommLedger& ledger, int64_t step, int rank);

// Collective over `world` (every rank must call it): rank 0 returns every
// rank's explain_lines for `step`, concatenated in rank order; the other ranks
// return "". Only rank 0 should print, so lines of different ranks never
// interleave. The report's own messages are recorded in the ledger outside
// any step (step −1), so they never show in a step's entries or byte counts.
std::string explain_report(Group& world, int64_t step);

// Collective over `world`: rank 0 returns every rank's `mine` concatenated in
// rank order, the others "". The transfers are recorded outside any step
// (step −1) under the labels "<what>: text lengths" and "<what>: text".
std::string gather_to_rank0(Group& world, const std::string& mine, std::string_view what);

}  // namespace mt

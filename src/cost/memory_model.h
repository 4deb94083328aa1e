// The memory model: each training rank's peak bytes per allocator kind
// (core/memory.h), derived from the configuration alone — the same parameter
// tables, pipeline stages, ZeRO shards and schedules the run builds, read as
// data — before anything is allocated. What each kind holds, the formula and
// the bound on the measured peak are in docs/PARALLELISM.md ("Memory per rank").
//
// `lower` is what the model says the tracked allocator's peak of one training
// step is; `upper` is the largest peak it allows. They are equal (the model is
// exact) for parameters, gradients, optimizer state, activations, scratch and
// the checkpoint's staging copy (kv_cache is generation's: 0 here);
// communication buffers in flight depend on when the other ranks' messages
// complete, so for `comm` (and the transient ZeRO-3 parameters) the model gives
// the peak with no overlap as `lower` and with the most overlap the code allows
// as `upper`.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/memory.h"

namespace mt {

// A rank's place in the mesh (dp outermost, tp innermost; docs/PARALLELISM.md).
struct RankCoords {
  int64_t dp = 0, pp = 0, cp = 0, tp = 0;
  int64_t ep = 0;  // the rank's index in its expert-parallel group: (dp·cp + cp) mod ep
};
RankCoords mesh_coords(const ParallelConfig& p, int64_t rank);

struct RankMemory {
  int64_t rank = 0;
  std::array<int64_t, kNumMemKinds> lower{};  // bytes, the model's peak per kind
  std::array<int64_t, kNumMemKinds> upper{};  // bytes, the largest peak the model allows
  // Σ over kinds of upper: the kinds peak at different moments of a step, so
  // this bounds the tracked total peak from above.
  int64_t total() const;
};

// Rank `rank` of `cfg`'s layout during a training step (after the first: the
// optimizer's state and the pipeline's activation slots exist by then).
RankMemory estimate_rank_memory(const Config& cfg, int64_t rank);
// The ranks `ranks` of the layout, the schedule built once for all of them
// (what a caller modelling many ranks should use).
std::vector<RankMemory> estimate_ranks(const Config& cfg, const std::vector<int64_t>& ranks);
// Every rank of the layout, in rank order.
std::vector<RankMemory> estimate_all_ranks(const Config& cfg);

// The model beside measured peaks (`measured[r][k]`, bytes, rank r): a table,
// one row per rank and kind, with "ok" or "OUTSIDE" per row; *all_within says
// whether every row is inside its bound.
std::string memory_model_table(const std::vector<RankMemory>& model,
                               const std::vector<std::array<int64_t, kNumMemKinds>>& measured,
                               bool* all_within);

}  // namespace mt

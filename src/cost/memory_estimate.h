// The memory estimate: each rank's bytes, estimated from the configuration and
// the layout before anything is allocated, so that a run that cannot fit is
// refused at start-up with the numbers instead of dying in the allocator (or
// taking the machine down). The categories are those of the allocator's
// counters (core/memory.h); the observability work compares them with the
// measured peaks.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "config/config.h"
#include "core/checked.h"
#include "core/memory.h"
#include "model/config.h"

namespace mt {

struct MemoryEstimate {
  std::vector<std::pair<std::string, int64_t>> parts;  // (category, bytes), one rank
  int64_t total = 0;
  // Training (cost/memory_model.h): the rank with the most bytes, and its
  // bytes per allocator kind (the figure asked for; parts names them in that order).
  // rank −1 and by_kind all zero when the coarse model answered (sizes beyond
  // 64 TiB a rank) or for evaluation.
  int64_t rank = -1;
  std::array<int64_t, kNumMemKinds> by_kind{};
  const std::pair<std::string, int64_t>& largest() const;
};

// Sizes are checked_mul / checked_add (core/checked.h): ConfigError naming what
// was computed when the result leaves 64 bits (10^12 × 10^12 does, before any
// estimate could be compared).

// Elements of the whole model's parameters, overflow-checked.
int64_t checked_param_count(const ModelConfig& m);

// The training rank of `cfg`'s layout that needs the most: the memory model
// (cost/memory_model.h, exact per allocator kind; docs/PARALLELISM.md "Memory
// per rank") over the ranks that can differ (pp stage, tp shard, experts). For
// sizes beyond 64 TiB a rank (or over 100,000 layers) the coarse model
// answers: parameters, gradients and optimizer state sharded as tp, pp and the
// ZeRO stage shard them, activations, logits, RoPE tables.
//
// `figure` picks which of the model's two numbers per kind is summed: `bound`,
// the most the code allows when communication overlaps (what the start-up
// check refuses on), or `peak`, the peak with communication not overlapping
// computation (MPI on CPUs, which progresses a collective only inside its
// calls: what runs here). They differ only for communication buffers and
// ZeRO-3's gathered units.
enum class MemoryFigure { peak, bound };
MemoryEstimate estimate_training_memory(const Config& cfg, MemoryFigure figure = MemoryFigure::bound);
// One process evaluating (or sampling from) model `m`: parameters, and the
// activations of `batch` windows of `seq` tokens.
MemoryEstimate estimate_eval_memory(const ModelConfig& m, int64_t batch, int64_t seq);

// Bytes this machine can still give: min(MemAvailable of /proc/meminfo, the
// cgroup's memory limit less its usage); -1 when neither can be read.
int64_t available_memory_bytes();

// ConfigError when `ranks_here` ranks of estimate `e` exceed `available`
// (bytes; negative: unknown, nothing checked), naming the estimate, the
// available memory and the largest contributor.
void require_fits(const MemoryEstimate& e, int ranks_here, int64_t available);

}  // namespace mt

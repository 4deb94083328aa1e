// Per-rank memory of a planned layout: the trainer's analytic model
// (cost/memory_estimate.h) for the layout's Config, then sized for the
// machine's precision (docs/PLANNER.md, "Memory").
#pragma once

#include "cost/memory_estimate.h"
#include "plan/layout.h"
#include "plan/machine.h"

namespace mt::plan {

// Bytes per element the planner assumes under bf16 mixed precision:
// bf16 parameters, fp32 gradients, fp32 master weights + two fp32 Adam
// moments (18 bytes per parameter before sharding), bf16 activations.
struct PrecisionSizes {
  double parameter = 4, gradient = 4, optimizer = 8, activation = 4;
};
PrecisionSizes precision_sizes(const std::string& precision);
// One line stating the assumption, printed with the plan.
std::string precision_note(const std::string& precision);

// The memory of one rank of `l`: the largest rank by the trainer's per-rank
// model (cost/memory_model.h), its peak figure (MemoryFigure::peak), in the
// machine's precision; `rank` says which rank. HSDP shards the ZeRO state
// over the shard group; selective recomputation drops the MLP's saved
// activations; hier's node shards are sized for the g of the planner's
// placement (plan/collectives.h).
MemoryEstimate plan_memory(const PlanInput& in, const PlanLayout& l, const Machine& m);

}  // namespace mt::plan

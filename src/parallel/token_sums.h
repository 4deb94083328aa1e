// Sums over the ranks that hold different tokens of one microbatch or step,
// for the mixture of experts' statistics (model/llama_moe*.cpp): the model
// reaches these collectives only through here.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/group.h"

namespace mt {

// v[n] ← its sum over cp, then over tp_tokens (the tp group under SP, whose
// ranks route different tokens); a null group (or of size 1) is skipped.
void sum_router_statistics(double* v, int64_t n, Group* cp, Group* tp_tokens);

// Each layer's per-expert loads [E] ← their sum over `over` (the ranks whose
// tokens differ, dp × cp); null or size 1: unchanged.
void sum_expert_loads(std::vector<std::vector<int64_t>>& loads, Group* over);

}  // namespace mt

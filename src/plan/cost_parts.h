// The pieces of the time model (plan/cost.h) that its two files share: the
// stage's compute (plan/cost.cpp) and each axis's communication
// (plan/comm_cost.cpp), kept apart as the layer math is from its messages.
// Internal to mt_plan.
#pragma once

#include <string>
#include <vector>

#include "plan/cost.h"
#include "plan/memory.h"
#include "plan/node_order.h"

namespace mt::plan {

// One stage's work for one microbatch (all its chunks), in seconds.
struct StageWork {
  double forward = 0, backward = 0, recompute = 0, attention = 0, elementwise = 0;
};

// cp's attention as the trainer runs it (parallel/cp_ulysses.h): the ranks of
// its all-to-all (1: none) and of its ring (1: none), and the local query and
// kv heads the attention sees after the all-to-all (Hu = H_l / U; KVu = KV_l /
// U, or the one kv head replicated when KV_l < U).
struct CpShape {
  int64_t a2a = 1, ring = 1;
  double heads = 1, kv_heads = 1;
};

// One layout's prediction under way: its input, machine, sizes and placement.
struct StepCtx {
  const PlanInput& in;
  const PlanLayout& l;
  const Machine& m;
  int ranks_on_node;
  PrecisionSizes sizes;
  double tokens;  // rows of a microbatch on this rank: mbs · seq / cp
  CpShape cps;
  NodeMap nodes;  // the layout's groups on the nodes under its node order
  bool crosses(PlanGroup g) const { return nodes[g].crosses(); }
};

// "grad all-reduce 12 MiB over 8 ranks (crosses nodes)".
std::string describe(const char* op, double bytes, int64_t ranks, bool inter);
// Per microbatch (all chunks of this rank): tp's, cp's and ep's messages.
std::vector<AxisComm> microbatch_comm(const StepCtx& c, const StageWork& w);
// Per step: pp's sends at the chunk boundaries of `microbatches`.
AxisComm pp_comm(const StepCtx& c, double microbatches);
// Per step: the gradient reduction and ZeRO's gathers over dp × cp.
AxisComm dp_comm(const StepCtx& c, double params, int64_t microbatches, double backward_last, double compute);

}  // namespace mt::plan

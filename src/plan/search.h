// The planner's search: every layout of the input's devices that the
// trainer's rules accept (and that --layout's fixed fields allow), cp's
// attention among them (ring, Ulysses, each hybrid whose heads split) and the
// dp all-reduce (flat, and hierarchical where it cuts a group across nodes), predicted,
// the ones that do not fit in memory set aside, the rest ranked by step time
// (docs/PLANNER.md, "Search").
#pragma once

#include <string>
#include <vector>

#include "plan/cost.h"
#include "plan/layout.h"
#include "plan/machine.h"

namespace mt::plan {

struct PlanResult {
  std::vector<Prediction> ranked;    // fit, fastest first
  std::vector<Prediction> too_big;   // predicted, but over the device's memory; fastest first
  int64_t invalid = 0;               // refused by a rule (heads not divisible, ...)
  std::string first_invalid_reason;  // the rule of the first one refused, for the message when none is left
};

PlanResult search(const PlanInput& in, const Machine& m, const LayoutSpec& fixed);

// Why `loser` is slower than `best`: its largest differences, e.g.
// "+12.3 ms bubble (pp 8, 12 microbatches); +4.1 ms tp exposed (crosses nodes)".
std::string why_slower(const Prediction& loser, const Prediction& best);
// "does not fit: 93.1 GiB > 80.0 GiB (largest: AdamW state 60.2 GiB)".
std::string why_too_big(const Prediction& p, const Machine& m, int64_t devices);

}  // namespace mt::plan

// What `meshtrain plan` prints and writes: a prediction in detail (memory
// table, communication per axis, bubble, MFU), the ranking with why each
// runner-up lost, the scaling table, and the same as JSON
// (docs/FORMATS.md, "Plan output").
#pragma once

#include <string>
#include <vector>

#include "plan/search.h"

namespace mt::plan {

std::string format_prediction(const PlanInput& in, const Prediction& p, const Machine& m);
std::string format_ranking(const PlanInput& in, const PlanResult& r, const Machine& m, int top);

// One device count of a scaling study: the best layout for the strong
// (fixed global batch) and weak (global batch ∝ devices) series.
struct ScalingRow {
  std::string kind;  // strong | weak
  int64_t devices = 0, global_batch = 0;
  bool found = false;
  Prediction best;
};
std::string format_scaling(const PlanInput& in, const std::vector<ScalingRow>& rows);

std::string prediction_json(const PlanInput& in, const Prediction& p, const Machine& m);
std::string plan_json(const PlanInput& in, const PlanResult& r, const Machine& m, int top,
                      const std::vector<ScalingRow>& scaling);

}  // namespace mt::plan

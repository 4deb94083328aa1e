#include "parallel/expert_grads.h"

#include <algorithm>

#include "core/error.h"
#include "optim/clip.h"

namespace mt {

std::vector<GradRun> grad_runs(const std::vector<UnitSpec>& units, int64_t begin, int64_t end) {
  std::vector<GradRun> runs;
  for (const UnitSpec& u : units) {
    for (const ParamSlot& p : u.params) {
      const int64_t b = std::max(begin, p.offset), e = std::min(end, p.offset + p.numel());
      if (b >= e) continue;
      if (!runs.empty() && runs.back().expert == p.expert && runs.back().end == b)
        runs.back().end = e;
      else
        runs.push_back({b, e, p.expert});
    }
  }
  MT_CHECK(!runs.empty() && runs.front().begin == begin && runs.back().end == end, "gradient range [", begin,
           ", ", end, ") is not covered by parameters");
  return runs;
}

double counted_sum_squares_of(const std::vector<UnitSpec>& units, const float* full, bool expert) {
  double s = 0.0;
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      if (p.norm_counted && p.expert == expert) s += sum_squares(full + p.offset, p.numel());
    }
  }
  return s;
}

}  // namespace mt

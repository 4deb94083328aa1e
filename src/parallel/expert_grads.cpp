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

std::vector<Work> all_reduce_runs(const std::vector<UnitSpec>& units, float* grads, int64_t begin,
                                  int64_t end, Group& dense, Group* replicas, const std::string& label,
                                  SumOrder order) {
  std::vector<Work> works;
  for (const GradRun& r : grad_runs(units, begin, end)) {
    Group* g = r.expert ? replicas : &dense;
    if (g == nullptr || g->size() == 1) continue;
    works.push_back(g->all_reduce_async(grads + r.begin, r.end - r.begin, ElemType::f32, order,
                                        label + (r.expert ? " experts" : " dense")));
  }
  return works;
}

double ep_sum_squares(const std::vector<UnitSpec>& units, const float* full, Group& ep) {
  double sums[2] = {0.0, 0.0};  // others, experts
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      if (p.norm_counted) sums[p.expert ? 1 : 0] += sum_squares(full + p.offset, p.numel());
    }
  }
  ep.all_reduce(&sums[1], 1, "grad norm experts");
  return sums[0] + sums[1];
}

void ep_sum_squares_exact(const std::vector<UnitSpec>& units, const float* full, Group& ep, ExactSum& acc) {
  ExactSum experts;
  for (const auto& u : units) {
    for (const auto& p : u.params) {
      if (p.norm_counted) exact_sum_squares(p.expert ? experts : acc, full + p.offset, p.numel());
    }
  }
  ep.all_reduce(experts.words(), ExactSum::kWords, "grad norm experts");
  experts.normalise();
  acc.merge(experts);
}

}  // namespace mt

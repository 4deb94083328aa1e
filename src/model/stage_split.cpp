#include "model/stage_split.h"

namespace mt {

std::vector<StageRange> split_stages(const std::vector<int64_t>& counts) {
  const int64_t K = static_cast<int64_t>(counts.size());
  std::vector<StageRange> stages;
  int64_t at = 0;
  for (int64_t k = 0; k < K; ++k) {
    StageRange s;
    s.first_layer = at;
    s.end_layer = at + counts[static_cast<size_t>(k)];
    s.embed = k == 0;
    s.head = k == K - 1;
    at = s.end_layer;
    stages.push_back(s);
  }
  return stages;
}

}  // namespace mt

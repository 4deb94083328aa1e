#include "parallel/token_sums.h"

namespace mt {

void sum_router_statistics(double* v, int64_t n, Group* cp, Group* tp_tokens) {
  for (Group* g : {cp, tp_tokens}) {
    if (g != nullptr && g->size() > 1) g->all_reduce(v, n, "moe router statistics");
  }
}

void sum_expert_loads(std::vector<std::vector<int64_t>>& loads, Group* over) {
  if (over == nullptr || over->size() <= 1) return;
  for (std::vector<int64_t>& v : loads)
    over->all_reduce(v.data(), static_cast<int64_t>(v.size()), "router bias counts");
}

}  // namespace mt

#include "parallel/expert_parallel.h"

#include <cmath>

#include "core/error.h"
#include "ops/moe_kernels.h"

namespace mt::ep {

int64_t expert_capacity(double factor, int64_t tokens, int64_t k, int64_t E) {
  if (factor <= 0) return -1;
  return static_cast<int64_t>(std::ceil(factor * static_cast<double>(tokens * k) / static_cast<double>(E)));
}

void check_experts_divide(int64_t n_experts, int64_t ep) {
  MT_REQUIRE(n_experts % ep == 0, ConfigError, "model.n_experts (", n_experts,
             ") must be divisible by parallel.ep (", ep, ")");
}

void check_expert_parallel(const EpLayout& l) {
  if (l.ep == 1) return;
  MT_REQUIRE(l.n_experts > 0, ConfigError, "parallel.ep (", l.ep,
             ") needs a mixture of experts, but model.n_experts is ", l.n_experts, " (a dense model)");
  check_experts_divide(l.n_experts, l.ep);
  MT_REQUIRE((l.dp * l.cp) % l.ep == 0, ConfigError, "parallel.ep (", l.ep, ") must divide parallel.dp (",
             l.dp, ") x parallel.cp (", l.cp, ") = ", l.dp * l.cp);
  MT_REQUIRE(l.capacity_factor == 0, ConfigError, "parallel.ep (", l.ep, ") with model.capacity_factor (",
             l.capacity_factor, "): expert parallelism is dropless only so far");
  // LAMB sums each tensor's squares over the ranks holding its pieces by one
  // tensor index per chunk; under ep the ranks of a group hold different experts.
  MT_REQUIRE(!l.lamb, ConfigError, "parallel.ep (", l.ep,
             ") with train.optimizer = lamb: LAMB's per-tensor norms over expert-parallel ranks are not "
             "built yet (adamw or sgd)");
}

ExpertDispatch::ExpertDispatch(Group* group, int64_t n_experts) : group_(group), E_(n_experts) {
  if (distributed()) check_experts_divide(E_, group_->size());
}

void ExpertDispatch::plan(RoutePlan& p, const int32_t* expert_of, int64_t choices, int64_t capacity,
                          std::string_view label) const {
  const auto E = static_cast<size_t>(E_);
  p.choices = choices;
  p.routed.assign(E, 0);
  for (int64_t c = 0; c < choices; ++c) {
    const int32_t e = expert_of[c];
    MT_CHECK(e >= 0 && e < E_, "choice ", c, " routed to expert ", e, " of ", E_);
    ++p.routed[static_cast<size_t>(e)];
  }
  p.count.resize(E);
  p.offset.assign(E + 1, 0);
  p.dropped = 0;
  for (size_t e = 0; e < E; ++e) {
    p.count[e] = capacity < 0 ? p.routed[e] : std::min(p.routed[e], capacity);
    p.dropped += p.routed[e] - p.count[e];
    p.offset[e + 1] = p.offset[e] + p.count[e];
  }
  // A counting sort: stable, so within an expert the choices stay in index order.
  std::vector<int64_t> next(p.offset.begin(), p.offset.end() - 1);
  p.order.assign(static_cast<size_t>(p.rows()), 0);
  p.row_of.assign(static_cast<size_t>(choices), -1);
  for (int64_t c = 0; c < choices; ++c) {
    const auto e = static_cast<size_t>(expert_of[c]);
    if (next[e] == p.offset[e + 1]) continue;  // over capacity: dropped
    p.row_of[static_cast<size_t>(c)] = next[e];
    p.order[static_cast<size_t>(next[e]++)] = c;
  }
  p.order_dev.mirror(p.order, "moe routing", MemKind::activation);
  p.row_of_dev.mirror(p.row_of, "moe routing", MemKind::activation);
  if (distributed()) {
    exchange_counts(p, label);
  } else {
    p.lcount = p.count;
    p.loffset = p.offset;
  }
}

void ExpertDispatch::dispatch(float* xs, const float* x, const RoutePlan& p, int64_t k, int64_t C) const {
  moe_dispatch(xs, x, p.order_dev.data(), p.rows(), k, C);
}

void ExpertDispatch::dispatch_backward(float* dx, const float* dxs, const RoutePlan& p, int64_t k,
                                       int64_t C) const {
  moe_dispatch_backward(dx, dxs, p.row_of_dev.data(), p.choices / k, k, C);
}

void ExpertDispatch::combine(float* yk, const float* ys, const RoutePlan& p, int64_t C) const {
  moe_combine(yk, ys, p.row_of_dev.data(), p.choices, C);
}

void ExpertDispatch::combine_backward(float* dys, const float* dyk, const RoutePlan& p, int64_t C) const {
  moe_combine_backward(dys, dyk, p.order_dev.data(), p.rows(), C);
}

}  // namespace mt::ep

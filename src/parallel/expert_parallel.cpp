#include "parallel/expert_parallel.h"

#include <cmath>
#include <cstring>

#include "core/error.h"

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
  if (distributed()) {
    exchange_counts(p, label);
  } else {
    p.lcount = p.count;
    p.loffset = p.offset;
  }
}

void ExpertDispatch::dispatch(float* xs, const float* x, const RoutePlan& p, int64_t k, int64_t C) const {
  const int64_t R = p.rows();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(xs + r * C, x + (p.order[static_cast<size_t>(r)] / k) * C,
                sizeof(float) * static_cast<size_t>(C));
}

void ExpertDispatch::dispatch_backward(float* dx, const float* dxs, const RoutePlan& p, int64_t k,
                                       int64_t C) const {
  const int64_t N = p.choices / k;
  // Per token, its rows in slot order: a fixed order of the sum.
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    float* d = dx + n * C;
    std::memset(d, 0, sizeof(float) * static_cast<size_t>(C));
    for (int64_t s = 0; s < k; ++s) {
      const int64_t r = p.row_of[static_cast<size_t>(n * k + s)];
      if (r < 0) continue;
      const float* g = dxs + r * C;
      for (int64_t c = 0; c < C; ++c)
        d[c] += g[c];
    }
  }
}

void ExpertDispatch::combine(float* yk, const float* ys, const RoutePlan& p, int64_t C) const {
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < p.choices; ++c) {
    const int64_t r = p.row_of[static_cast<size_t>(c)];
    if (r < 0)
      std::memset(yk + c * C, 0, sizeof(float) * static_cast<size_t>(C));
    else
      std::memcpy(yk + c * C, ys + r * C, sizeof(float) * static_cast<size_t>(C));
  }
}

void ExpertDispatch::combine_backward(float* dys, const float* dyk, const RoutePlan& p, int64_t C) const {
  const int64_t R = p.rows();
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(dys + r * C, dyk + p.order[static_cast<size_t>(r)] * C,
                sizeof(float) * static_cast<size_t>(C));
}

}  // namespace mt::ep

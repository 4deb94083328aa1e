#include "infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/philox.h"

namespace mt {

void check_sampling(const SamplingOptions& o) {
  MT_REQUIRE(std::isfinite(o.temperature) && o.temperature >= 0, ConfigError, "--temperature (",
             o.temperature, ") must be 0 (greedy) or positive");
  MT_REQUIRE(o.top_k >= 0, ConfigError, "--top-k (", o.top_k, ") must be 0 (no limit) or positive");
  MT_REQUIRE(o.top_p > 0 && o.top_p <= 1, ConfigError, "--top-p (", o.top_p, ") must be in (0, 1]");
}

namespace {

struct Candidate {
  double z;   // the raw logit
  double id;  // the token id (a double, so that one all-gather carries both)
};
constexpr double kNoId = 1e18;  // padding, after every real id

bool before(const Candidate& a, const Candidate& b) {
  return a.z > b.z || (a.z == b.z && a.id < b.id);
}

bool on(Group* tp) {
  return tp != nullptr && tp->size() > 1;
}

// The m most probable tokens of the whole row, in candidate order (fewer when V < m).
std::vector<Candidate> top_candidates(const LogitsShard& row, int64_t m, Group* tp) {
  const int64_t n = row.end - row.begin;
  std::vector<Candidate> mine;
  for (int64_t i = 0; i < n; ++i)
    mine.push_back({static_cast<double>(row.z[i]), static_cast<double>(row.begin + i)});
  const int64_t keep = std::min(m, n);
  std::partial_sort(mine.begin(), mine.begin() + keep, mine.end(), before);
  mine.resize(static_cast<size_t>(m), Candidate{-std::numeric_limits<double>::infinity(), kNoId});
  std::vector<Candidate> all = mine;
  if (on(tp)) {
    all.resize(static_cast<size_t>(m * tp->size()));
    tp->all_gather(mine.data(), all.data(), 2 * m, ElemType::f64, "generate sampling candidates");
  }
  std::sort(all.begin(), all.end(), before);
  all.resize(static_cast<size_t>(std::min(m, row.V)));
  return all;
}

double global_max(const LogitsShard& row, Group* tp) {
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < row.end - row.begin; ++i)
    m = std::max(m, static_cast<double>(row.z[i]));
  if (on(tp)) tp->all_reduce(&m, 1, "generate logits max", ReduceOp::max);
  return m;
}

// Σ_v exp(z_v · scale − shift) over the whole row.
double global_sum_exp(const LogitsShard& row, double scale, double shift, Group* tp) {
  double s = 0;
  for (int64_t i = 0; i < row.end - row.begin; ++i)
    s += std::exp(static_cast<double>(row.z[i]) * scale - shift);
  if (on(tp)) tp->all_reduce(&s, 1, "generate logits sum-exp");
  return s;
}

// The token drawn from the candidates by the rule of sampling.h, or −1 when
// the m candidates do not decide it (the rule needs tokens past them).
// total: the normaliser of exp(z/T − top) over the tokens top_k keeps.
int64_t draw(const std::vector<Candidate>& c, bool complete, double total, double top,
             const SamplingOptions& o, double uniform) {
  const size_t m = c.size();
  std::vector<double> cum(m);
  double run = 0;
  for (size_t i = 0; i < m; ++i)
    cum[i] = run += std::exp(c[i].z / o.temperature - top);
  size_t n = m;  // nucleus: the shortest prefix reaching top_p of the mass
  double mass = total;
  if (o.top_p < 1.0) {
    const auto it = std::find_if(cum.begin(), cum.end(), [&](double x) { return x >= o.top_p * total; });
    if (it == cum.end() && !complete) return -1;
    n = it == cum.end() ? m : static_cast<size_t>(it - cum.begin()) + 1;
    mass = cum[n - 1];
  }
  const double u = uniform * mass;
  for (size_t i = 0; i < n; ++i)
    if (u < cum[i]) return static_cast<int64_t>(i);
  return n < m || complete ? static_cast<int64_t>(n) - 1 : -1;
}

}  // namespace

Sampled sample_token(const LogitsShard& row, Group* tp, const SamplingOptions& o, int64_t prompt_index,
                     int64_t position) {
  const double zmax = global_max(row, tp);
  const double lse = zmax + std::log(global_sum_exp(row, 1.0, zmax, tp));
  // Any NaN or infinite logit makes the sum (all-reduced: the same on every tp
  // rank) non-finite: every rank refuses together rather than pick a token of nothing.
  MT_REQUIRE(std::isfinite(lse), Error, "generate: the logits of prompt ", prompt_index, " at position ",
             position, " are not finite (log-sum-exp ", lse,
             "): the model's weights or activations overflow; no token can be sampled");
  Sampled out;
  if (o.temperature == 0.0) {
    const Candidate best = top_candidates(row, 1, tp)[0];
    out.token = static_cast<int32_t>(best.id);
    out.logprob = best.z - lse;
    return out;
  }
  const int64_t K = o.top_k > 0 ? std::min(o.top_k, row.V) : row.V;
  const double top = zmax / o.temperature;
  const PhiloxKey key = philox_key(o.seed, "generate/" + std::to_string(prompt_index));
  const double uniform = philox_uniform(key, static_cast<uint64_t>(position));
  // Without top_k the normaliser runs over the whole vocabulary: all-reduced.
  const double all = o.top_k > 0 ? 0.0 : global_sum_exp(row, 1.0 / o.temperature, top, tp);
  for (int64_t m = o.top_k > 0 ? K : std::min<int64_t>(K, 64);; m = std::min(K, 2 * m)) {
    const std::vector<Candidate> c = top_candidates(row, m, tp);
    double total = all;
    if (o.top_k > 0) {  // the candidates are all top_k keeps
      total = 0;
      for (const Candidate& x : c)
        total += std::exp(x.z / o.temperature - top);
    }
    const int64_t i = draw(c, m == K, total, top, o, uniform);
    if (i < 0) continue;
    out.token = static_cast<int32_t>(c[static_cast<size_t>(i)].id);
    out.logprob = c[static_cast<size_t>(i)].z - lse;
    return out;
  }
}

}  // namespace mt

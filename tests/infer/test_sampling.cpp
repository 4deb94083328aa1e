// The sampling rule of infer/sampling.h against a naive reference written
// here from its definition (every token sorted by logit then id, top_k, the
// nucleus, one Philox draw): the candidate gathering (m best, doubled while
// the rule needs more) must give the same token and log-prob.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/philox.h"
#include "infer/sampling.h"

namespace mt {
namespace {

int32_t reference_token(const std::vector<float>& z, const SamplingOptions& o, int64_t prompt, int64_t pos) {
  const int64_t V = static_cast<int64_t>(z.size());
  std::vector<int32_t> ids(z.size());
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(),
            [&](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); });
  if (o.temperature == 0) return ids[0];
  ids.resize(static_cast<size_t>(o.top_k > 0 ? std::min(o.top_k, V) : V));
  std::vector<double> p;
  for (int32_t id : ids)
    p.push_back(std::exp((static_cast<double>(z[id]) - z[ids[0]]) / o.temperature));
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  size_t n = 0;
  double mass = 0;
  while (n < p.size() && mass < o.top_p * total)
    mass += p[n++];
  if (o.top_p >= 1) mass = total, n = p.size();
  const double u =
      philox_uniform(philox_key(o.seed, "generate/" + std::to_string(prompt)), static_cast<uint64_t>(pos)) *
      mass;
  double cum = 0;
  for (size_t i = 0; i < n; ++i)
    if (u < (cum += p[i])) return ids[i];
  return ids[n - 1];
}

TEST(Sampling, CandidateGatheringEqualsTheWholeSortedVocabulary) {
  const int64_t V = 300;  // more than the first 64 candidates, so flat logits need the doubling
  int mismatches = 0, draws = 0, past_first = 0;
  for (double scale : {0.05, 1.0, 4.0}) {  // nearly flat to peaked
    std::vector<float> z(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v)
      z[static_cast<size_t>(v)] =
          static_cast<float>(scale * std::sin(0.37 * static_cast<double>(v * v % 97)));
    double lse = 0;
    for (float x : z)
      lse += std::exp(static_cast<double>(x));
    lse = std::log(lse);
    for (const SamplingOptions& o :
         {SamplingOptions{0.0, 0, 1.0, 1}, SamplingOptions{0.8, 0, 1.0, 2}, SamplingOptions{1.0, 0, 0.9, 3},
          SamplingOptions{1.3, 7, 1.0, 4}, SamplingOptions{0.7, 40, 0.5, 5}}) {
      for (int64_t pos = 0; pos < 40; ++pos) {
        const Sampled s = sample_token(z.data(), V, o, 3, pos);
        const int32_t want = reference_token(z, o, 3, pos);
        mismatches += s.token != want ? 1 : 0;
        ++draws;
        // Both in double from the same fp32 logits: each lse within
        // γ^double_{V+2}·(|lse| + max|z|) of exact (a sum of V exps, a log),
        // ≈ 3e-13 here; 1e-9 is that with a plain margin, not a host's rounding.
        EXPECT_NEAR(s.logprob, z[static_cast<size_t>(s.token)] - lse, 1e-9);
        std::vector<float> sorted = z;
        std::sort(sorted.begin(), sorted.end(), std::greater<>());
        past_first += z[static_cast<size_t>(s.token)] < sorted[63] ? 1 : 0;
      }
    }
  }
  EXPECT_EQ(mismatches, 0) << "of " << draws << " draws";
  EXPECT_GT(past_first, 0) << "no draw came from past the first 64 candidates: the doubling went untested";
}

}  // namespace
}  // namespace mt

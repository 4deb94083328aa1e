#include "infer/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
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
double log_softmax_at(const float* z, int64_t V, int64_t i) {
  const double m = *std::max_element(z, z + V);
  double sum = 0;
  for (int64_t j = 0; j < V; ++j)
    sum += std::exp(static_cast<double>(z[j]) - m);
  return static_cast<double>(z[i]) - m - std::log(sum);
}
}  // namespace

Sampled sample_token(const float* z, int64_t V, const SamplingOptions& o, int64_t prompt_index,
                     int64_t position) {
  Sampled out;
  if (o.temperature == 0.0) {
    out.token = static_cast<int32_t>(std::max_element(z, z + V) - z);  // the first of equal maxima
    out.logprob = log_softmax_at(z, V, out.token);
    return out;
  }
  // Candidates by logit, largest first, ties by id: an order that depends on nothing else.
  std::vector<int32_t> ids(static_cast<size_t>(V));
  std::iota(ids.begin(), ids.end(), 0);
  const size_t keep = o.top_k > 0 ? static_cast<size_t>(std::min(o.top_k, V)) : ids.size();
  auto before = [z](int32_t a, int32_t b) { return z[a] > z[b] || (z[a] == z[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(keep), ids.end(), before);
  ids.resize(keep);
  std::vector<double> p(keep);
  const double top = static_cast<double>(z[ids[0]]) / o.temperature;
  double total = 0;
  for (size_t i = 0; i < keep; ++i)
    total += p[i] = std::exp(static_cast<double>(z[ids[i]]) / o.temperature - top);
  size_t n = keep;  // nucleus: the shortest prefix reaching top_p of the mass
  if (o.top_p < 1.0) {
    double cum = 0;
    for (n = 0; n < keep;) {
      cum += p[n++];
      if (cum >= o.top_p * total) break;
    }
  }
  const double mass = std::accumulate(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n), 0.0);
  const PhiloxKey key = philox_key(o.seed, "generate/" + std::to_string(prompt_index));
  const double u = philox_uniform(key, static_cast<uint64_t>(position)) * mass;
  double cum = 0;
  out.token = ids[n - 1];
  for (size_t i = 0; i < n; ++i) {
    cum += p[i];
    if (u < cum) {
      out.token = ids[i];
      break;
    }
  }
  out.logprob = log_softmax_at(z, V, out.token);
  return out;
}

}  // namespace mt

#include "ops/router.h"

#include <cmath>
#include <limits>
#include <vector>

#include "ops/cpu_kernels.h"

namespace mt {

namespace {

// Row n: the softmax in fp32 (max subtracted, the sum in double), its lse.
void softmax_row(float* p, float* lse, const float* z, int64_t E) {
  float m = z[0];
  for (int64_t e = 1; e < E; ++e)
    m = std::max(m, z[e]);
  double s = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    p[e] = std::exp(z[e] - m);
    s += p[e];
  }
  const float inv = static_cast<float>(1.0 / s);
  for (int64_t e = 0; e < E; ++e)
    p[e] *= inv;
  *lse = m + static_cast<float>(std::log(s));
}

}  // namespace

double cpu::router_forward(float* probs, float* lse, int32_t* experts, float* weights, const float* logits,
                           const float* bias, RouterDims d) {
  const int64_t N = d.N, E = d.E, k = d.k;
  double margin = std::numeric_limits<double>::infinity();
#pragma omp parallel for schedule(static) reduction(min : margin)
  for (int64_t n = 0; n < N; ++n) {
    float* p = probs + n * E;
    softmax_row(p, lse + n, logits + n * E, E);
    std::vector<float> score(p, p + E);
    if (bias != nullptr) {
      for (int64_t e = 0; e < E; ++e)
        score[static_cast<size_t>(e)] += bias[e];
    }
    std::vector<char> taken(static_cast<size_t>(E), 0);
    float last = 0.0f;
    double sum = 0.0;
    for (int64_t s = 0; s <= k && s < E; ++s) {
      int64_t best = -1;  // strict > : among equal scores the lower index wins
      for (int64_t e = 0; e < E; ++e) {
        if (!taken[static_cast<size_t>(e)] &&
            (best < 0 || score[static_cast<size_t>(e)] > score[static_cast<size_t>(best)]))
          best = e;
      }
      if (s == k) {  // the first expert not chosen: the gap to the k-th
        margin = std::min(margin, static_cast<double>(last) - score[static_cast<size_t>(best)]);
        break;
      }
      taken[static_cast<size_t>(best)] = 1;
      last = score[static_cast<size_t>(best)];
      experts[n * k + s] = static_cast<int32_t>(best);
      sum += p[best];
    }
    for (int64_t s = 0; s < k; ++s)
      weights[n * k + s] = static_cast<float>(p[experts[n * k + s]] / sum);
  }
  return margin;
}

void cpu::router_backward(float* dlogits, const float* dweights, const float* dprob_all, float z_scale,
                          const float* probs, const float* lse, const int32_t* experts, const float* weights,
                          RouterDims d) {
  const int64_t N = d.N, E = d.E, k = d.k;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* p = probs + n * E;
    const float* w = weights + n * k;
    const float* dw = dweights + n * k;
    float* dz = dlogits + n * E;
    // dL/dp: through w_s = p[e_s] / S (S = Σ_j p[e_j]): dp[e_s] = (dw_s − Σ_j dw_j·w_j) / S.
    std::vector<double> dp(static_cast<size_t>(E), 0.0);
    if (dprob_all != nullptr) {
      for (int64_t e = 0; e < E; ++e)
        dp[static_cast<size_t>(e)] = dprob_all[e];
    }
    double S = 0.0, dot = 0.0;
    for (int64_t s = 0; s < k; ++s) {
      S += p[experts[n * k + s]];
      dot += static_cast<double>(dw[s]) * w[s];
    }
    for (int64_t s = 0; s < k; ++s)
      dp[static_cast<size_t>(experts[n * k + s])] += (dw[s] - dot) / S;
    // Through the softmax: dz = p ⊙ (dp − Σ p·dp); the z-loss adds z_scale·lse·p.
    double pdp = 0.0;
    for (int64_t e = 0; e < E; ++e)
      pdp += p[e] * dp[static_cast<size_t>(e)];
    for (int64_t e = 0; e < E; ++e)
      dz[e] = static_cast<float>(p[e] * (dp[static_cast<size_t>(e)] - pdp) + z_scale * lse[n] * p[e]);
  }
}

}  // namespace mt

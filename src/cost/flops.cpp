#include "cost/flops.h"

#include <algorithm>
#include <vector>

#include "core/timer.h"
#include "ops/gemm.h"

namespace mt {

int64_t matmul_params(const ModelConfig& c) {
  const int64_t C = c.d_model;
  const int64_t attention = c.qkv_dim() * C + C * c.q_dim();
  // A mixture-of-experts layer's active parameters: the router and the top_k
  // experts each token runs through.
  const int64_t moe = c.n_experts * C + c.top_k * 3 * c.expert_hidden() * C;
  const int64_t n_moe = c.n_moe_layers();
  return c.n_layers * attention + (c.n_layers - n_moe) * 3 * c.ffn_hidden * C + n_moe * moe +
         c.vocab_size * C;
}

double train_flops_per_token(const ModelConfig& c, int64_t seq_len) {
  return 6.0 * static_cast<double>(matmul_params(c)) +
         6.0 * static_cast<double>(c.n_layers * c.n_heads * c.head_dim() * seq_len);
}

const char* matmul_ceiling_name() {
  if (matmul_precision() == MatmulPrecision::fp32) return "sgemm";
  return bf16_kernel() == Bf16Kernel::onednn ? "bf16 onednn gemm" : "bf16 emulated gemm";
}

double measure_matmul_gflops(int64_t n, double seconds, int min_reps) {
  std::vector<float> a(static_cast<size_t>(n * n), 0.5f), b(a.size(), 0.25f), c(a.size());
  sgemm(Trans::no, Trans::no, n, n, n, a.data(), n, b.data(), n, c.data(), n, Out::assign);  // warm-up
  double best = 1e30;
  Timer total;
  int reps = 0;
  while (reps < min_reps || (total.seconds() < seconds && reps < 100)) {
    Timer t;
    sgemm(Trans::no, Trans::no, n, n, n, a.data(), n, b.data(), n, c.data(), n, Out::assign);
    best = std::min(best, t.seconds());
    ++reps;
  }
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best / 1e9;
}

}  // namespace mt

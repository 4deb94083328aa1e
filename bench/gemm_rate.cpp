#include "gemm_rate.h"

#include <algorithm>

#include "core/timer.h"
#include "cost/flops.h"
#include "ops/gemm.h"

namespace mt::bench {

namespace {

// GFLOP/s of C[M, N] = A[M, K] · B[K, N], best repetition within `seconds`.
double gemm_gflops(int64_t M, int64_t N, int64_t K, double seconds) {
  std::vector<float> a(static_cast<size_t>(M * K), 0.5f), b(static_cast<size_t>(K * N), 0.25f),
      c(static_cast<size_t>(M * N));
  sgemm(Trans::no, Trans::no, M, N, K, a.data(), K, b.data(), N, c.data(), N, Out::assign);  // warm-up
  double best = 1e30;
  Timer total;
  for (int reps = 0; reps < 3 || (total.seconds() < seconds && reps < 100); ++reps) {
    Timer t;
    sgemm(Trans::no, Trans::no, M, N, K, a.data(), K, b.data(), N, c.data(), N, Out::assign);
    best = std::min(best, t.seconds());
  }
  return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K) / best / 1e9;
}

}  // namespace

std::vector<GemmRate> measure_gemm_rates(const ModelConfig& cfg, int64_t tokens, double seconds_each) {
  struct Shape {
    int64_t M, N, K;
    const char* what;
  };
  const int64_t C = cfg.d_model, F = cfg.ffn_hidden;
  const Shape shapes[] = {{tokens, cfg.qkv_dim(), C, "qkv"},
                          {tokens, 2 * F, C, "gate_up"},
                          {tokens, C, F, "down"},
                          {tokens, cfg.vocab_size, C, "lm_head"}};
  std::vector<GemmRate> rates;
  rates.push_back({"1024x1024x1024", measure_matmul_gflops(1024, seconds_each)});
  for (const Shape& s : shapes) {
    rates.push_back(
        {std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) + " " + s.what,
         gemm_gflops(s.M, s.N, s.K, seconds_each)});
  }
  return rates;
}

std::vector<GemmRate> max_rates(const std::vector<GemmRate>& a, const std::vector<GemmRate>& b) {
  std::vector<GemmRate> out = a;
  for (size_t i = 0; i < out.size() && i < b.size(); ++i)
    out[i].gflops = std::max(out[i].gflops, b[i].gflops);
  return out;
}

}  // namespace mt::bench

// meshtrain_attention_bench: the blockwise attention kernel (ops/attention.h)
// at the benchmark shape, forward and backward, against a 1024³ sgemm measured
// in the same process (docs/BENCHMARKS.md, "Definitions": rates side by side, as ratios). Prints a
// table; asserts nothing. `make bench-attention` runs it.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "core/threads.h"
#include "core/timer.h"
#include "ops/attention.h"
#include "ops/gemm.h"

namespace {

std::vector<float> random_vec(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v)
    x = dist(gen);
  return v;
}

template <class F>
double best_of(int reps, F&& fn) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    mt::Timer t;
    fn();
    best = std::min(best, t.seconds());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 5;
  int64_t B = 8, T = 256, H = 8, KV = 8, D = 64;
  CLI::App app{"Attention forward and backward rates against this machine's sgemm rate"};
  app.add_option("--threads", threads, "Threads")->capture_default_str();
  app.add_option("--reps", reps, "Timed repetitions (the best is kept)")->capture_default_str();
  app.add_option("--batch", B, "Sequences")->capture_default_str();
  app.add_option("--seq-len", T, "Tokens per sequence")->capture_default_str();
  app.add_option("--heads", H, "Query heads")->capture_default_str();
  app.add_option("--kv-heads", KV, "Key/value heads")->capture_default_str();
  app.add_option("--head-dim", D, "Head dimension")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  mt::set_num_threads(threads);

  const int64_t n = 1024;
  const std::vector<float> a = random_vec(n * n, 51), bm = random_vec(n * n, 52);
  std::vector<float> c(static_cast<size_t>(n * n));
  const auto gemm = [&] {
    mt::sgemm(mt::Trans::no, mt::Trans::no, n, n, n, a.data(), n, bm.data(), n, c.data(), n, mt::Out::assign);
  };
  gemm();
  const double gemm_rate = 2.0 * n * n * n / best_of(3, gemm) / 1e9;

  // q, k and v in one fused buffer [B, T, (H + 2·KV)·D], causal positions 0..T−1.
  const int64_t width = (H + 2 * KV) * D;
  const mt::AttentionDims d{B, T, T, H, KV, D, width, width, H * D};
  std::vector<int32_t> pos(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i)
    pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % T);
  const std::vector<float> x = random_vec(B * T * width, 53), dout = random_vec(B * T * H * D, 54);
  std::vector<float> out(static_cast<size_t>(B * T * H * D)), lse(static_cast<size_t>(B * H * T));
  std::vector<float> gx(x.size(), 0.0f);
  const float *q = x.data(), *k = q + H * D, *v = k + KV * D;
  float *dq = gx.data(), *dk = dq + H * D, *dv = dk + KV * D;
  const auto fwd = [&] { mt::attention_forward(out.data(), lse.data(), q, k, v, pos.data(), pos.data(), d); };
  const auto bwd = [&] {
    mt::attention_backward(dq, dk, dv, dout.data(), out.data(), lse.data(), q, k, v, pos.data(), pos.data(),
                           d);
  };
  fwd();
  bwd();
  const double t_fwd = best_of(reps, fwd), t_bwd = best_of(reps, bwd);
  // QKᵀ and PV, 2 flops per multiply-add, halved by the causal mask; the backward does 2.5× the forward.
  const double fwd_flops = 2.0 * (2.0 * B * H * D * T * T / 2.0), bwd_flops = 2.5 * fwd_flops;
  const double fwd_rate = fwd_flops / t_fwd / 1e9, bwd_rate = bwd_flops / t_bwd / 1e9;
  const double total_rate = (fwd_flops + bwd_flops) / (t_fwd + t_bwd) / 1e9;
  std::printf("threads %d; sgemm 1024^3: %.1f GFLOP/s\n", mt::num_threads(), gemm_rate);
  std::printf("attention B=%lld T=%lld H=%lld KV=%lld D=%lld causal\n", static_cast<long long>(B),
              static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(KV),
              static_cast<long long>(D));
  std::printf("  forward  %.3f ms  %.1f GFLOP/s (%.0f%% of sgemm)\n", t_fwd * 1e3, fwd_rate,
              100 * fwd_rate / gemm_rate);
  std::printf("  backward %.3f ms  %.1f GFLOP/s (%.0f%% of sgemm)\n", t_bwd * 1e3, bwd_rate,
              100 * bwd_rate / gemm_rate);
  std::printf("  fwd+bwd  %.3f ms  %.1f GFLOP/s (%.0f%% of sgemm)\n", (t_fwd + t_bwd) * 1e3, total_rate,
              100 * total_rate / gemm_rate);
  return 0;
}

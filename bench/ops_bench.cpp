// meshtrain_ops_bench: every kernel of a training step outside the model's
// linear GEMMs, at configs/bench.toml's shapes (8 × 256 tokens, d 512, 8 heads
// of 64, ffn 1376, vocab 8192, 33.7M parameters), each the best of --reps
// calls (wall time and process CPU time), with the thread count of the step
// (docs/BENCHMARKS.md, "The rest of the bf16 step, and MFU against the bf16
// rate"). Attention runs at the precision --precision names (its tile products
// are GEMMs through ops/gemm.h). Prints milliseconds per call; asserts nothing.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "core/threads.h"
#include "core/timer.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/gemm.h"
#include "ops/rmsnorm.h"
#include "ops/rope.h"
#include "ops/swiglu.h"
#include "optim/adamw.h"
#include "optim/clip.h"

namespace {

std::vector<float> random_vec(int64_t n, uint32_t seed, float sd = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v)
    x = dist(gen);
  return v;
}

// The best wall time and the best process CPU time (all threads) of `reps`
// calls, in ms: on a shared machine the CPU time is the steadier of the two.
struct Best {
  double wall_ms, cpu_ms;
};
template <class F>
Best best_ms(int reps, F&& fn) {
  Best best{1e30, 1e30};
  for (int i = 0; i < reps; ++i) {
    const double cpu0 = mt::process_cpu_seconds();
    mt::Timer t;
    fn();
    best.wall_ms = std::min(best.wall_ms, t.seconds() * 1e3);
    best.cpu_ms = std::min(best.cpu_ms, (mt::process_cpu_seconds() - cpu0) * 1e3);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 2, reps = 7;
  std::string precision = "fp32";
  int64_t B = 8, T = 256, C = 512, H = 8, D = 64, F = 1376, V = 8192, P = 33694208;
  CLI::App app{"The step's kernels outside the linear GEMMs, at the bench model's shapes"};
  app.add_option("--threads", threads, "Threads")->capture_default_str();
  app.add_option("--reps", reps, "Timed calls per kernel (the best is kept)")->capture_default_str();
  app.add_option("--precision", precision, "Attention's tile products: fp32 | bf16")->capture_default_str();
  app.add_option("--params", P, "Parameters of the optimizer's pass")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  mt::set_num_threads(threads);
  const mt::MatmulPrecisionGuard guard(mt::parse_matmul_precision(precision, "--precision"));
  const int64_t N = B * T, QKV = 3 * H * D;

  std::vector<float> x = random_vec(N * C, 1), y(x.size()), dy = random_vec(N * C, 2), dx(x.size());
  std::vector<float> w = random_vec(C, 3), dw(static_cast<size_t>(C)), rstd(static_cast<size_t>(N));
  std::printf("%-26s %9s %9s\n", "kernel", "wall ms", "CPU ms");
  const auto row = [](const char* name, Best b) {
    std::printf("%-26s %9.3f %9.3f\n", name, b.wall_ms, b.cpu_ms);
  };
  row("rmsnorm forward",
      best_ms(reps, [&] { mt::rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f); }));
  row("rmsnorm backward", best_ms(reps, [&] {
        mt::rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
      }));

  std::vector<float> qkv = random_vec(N * QKV, 4), dqkv = random_vec(N * QKV, 5);
  std::vector<int32_t> pos(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % T);
  const mt::RopeTable rope(T, D, 10000.0);
  row("rope forward (q and k)", best_ms(reps, [&] {
        mt::rope_forward(qkv.data(), pos.data(), rope, N, H, QKV);
        mt::rope_forward(qkv.data() + H * D, pos.data(), rope, N, H, QKV);
      }));
  row("rope backward (q and k)", best_ms(reps, [&] {
        mt::rope_backward(dqkv.data(), pos.data(), rope, N, H, QKV);
        mt::rope_backward(dqkv.data() + H * D, pos.data(), rope, N, H, QKV);
      }));

  std::vector<float> att(static_cast<size_t>(N * H * D)), lse(static_cast<size_t>(B * H * T));
  std::vector<float> datt = random_vec(N * H * D, 6), dq(qkv.size());
  const mt::AttentionDims ad{B, T, T, H, H, D, QKV, QKV, H * D};
  const float *q = qkv.data(), *k = q + H * D, *v = k + H * D;
  row("attention forward", best_ms(reps, [&] {
        mt::attention_forward(att.data(), lse.data(), q, k, v, pos.data(), pos.data(), ad);
      }));
  row("attention backward", best_ms(reps, [&] {
        std::fill(dq.begin(), dq.end(), 0.0f);
        mt::attention_backward(dq.data(), dq.data() + H * D, dq.data() + 2 * H * D, datt.data(), att.data(),
                               lse.data(), q, k, v, pos.data(), pos.data(), ad);
      }));

  std::vector<float> gu = random_vec(N * 2 * F, 7), h(static_cast<size_t>(N * F)), dh = random_vec(N * F, 8);
  std::vector<float> dgu(gu.size());
  row("swiglu forward", best_ms(reps, [&] { mt::swiglu_forward(h.data(), gu.data(), N, F); }));
  row("swiglu backward", best_ms(reps, [&] { mt::swiglu_backward(dgu.data(), dh.data(), gu.data(), N, F); }));

  std::vector<float> logits = random_vec(N * V, 9), dlogits(logits.size()), losses(static_cast<size_t>(N));
  std::vector<float> lse_ce(static_cast<size_t>(N));
  std::vector<int32_t> targets(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i)
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % V);
  row("cross-entropy forward", best_ms(reps, [&] {
        mt::cross_entropy_forward(losses.data(), lse_ce.data(), logits.data(), targets.data(), N, V, -1);
      }));
  row("cross-entropy backward", best_ms(reps, [&] {
        mt::cross_entropy_backward(dlogits.data(), logits.data(), lse_ce.data(), targets.data(), 1e-3f, N, V,
                                   -1);
      }));

  std::vector<float> params = random_vec(P, 10, 0.02f), grads = random_vec(P, 11, 1e-3f);
  std::vector<float> m(static_cast<size_t>(P)), vv(static_cast<size_t>(P));
  double sink = 0;
  row("gradient sum of squares", best_ms(reps, [&] { sink += mt::sum_squares(grads.data(), P); }));
  row("clip (scale by 0.999)", best_ms(reps, [&] { mt::clip_by_norm(grads.data(), P, 1.001, 1.0); }));
  int64_t t = 0;
  row("adamw", best_ms(reps, [&] {
        mt::adamw_update(params.data(), grads.data(), m.data(), vv.data(), P, 3e-4, 0.9, 0.95, 1e-8, 0.1,
                         ++t);
      }));
  row("zero the gradients", best_ms(reps, [&] { std::fill(grads.begin(), grads.end(), 0.0f); }));
  std::printf("(checksum %g)\n", sink);
  return 0;
}

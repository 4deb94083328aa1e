// The rate of each GEMM of a model's training step under three kernels, side
// by side and interleaved (docs/BENCHMARKS.md, "bf16 through oneDNN"): fp32
// OpenBLAS, bf16 emulated (operands rounded into fp32, then OpenBLAS) and bf16
// oneDNN (operands rounded to bf16, then the CPU's bf16 units). Each shape is
// timed as sgemm sees it, the rounding of both operands included: the linear
// layers' forward (Y = X·Wᵀ), their input gradient (dX = dY·W) and weight
// gradient (dW += dYᵀ·X) at `tokens` rows, and attention's 64 × 64 tile
// products on one thread (as its OpenMP workers call them). Where the oneDNN
// kernel hands the tiles to AMX tiles (ops/gemm_amx.h), a fourth side,
// bf16_onednn_matmul, times them through oneDNN's matmul as before.
#include <omp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/timer.h"
#include "ops/gemm.h"
#include "ops/gemm_amx.h"
#include "ops/gemm_onednn.h"

namespace {

using namespace mt;

struct Shape {
  std::string what;
  Trans ta, tb;
  int64_t M, N, K;
  Out out;
  bool one_thread;  // timed on one thread, as attention's workers call it
};

using Direct = void (*)(Trans, Trans, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t,
                        float*, int64_t, Out);

struct Side {
  const char* name;
  MatmulPrecision precision;
  Bf16Kernel kernel;
  Direct direct = nullptr;  // called in place of sgemm, on the products amx::fits takes
};

// Seconds of the best of `reps` calls after a warm-up.
double best_seconds(const Shape& s, int reps, Direct direct) {
  const int64_t a_size = s.M * s.K, b_size = s.K * s.N;
  std::vector<float> a(static_cast<size_t>(a_size)), b(static_cast<size_t>(b_size)),
      c(static_cast<size_t>(s.M * s.N), 0.0f);
  for (int64_t i = 0; i < a_size; ++i)
    a[static_cast<size_t>(i)] = static_cast<float>((i * 7919) % 1000) / 1000.0f - 0.5f;
  for (int64_t i = 0; i < b_size; ++i)
    b[static_cast<size_t>(i)] = static_cast<float>((i * 104729) % 1000) / 1000.0f - 0.5f;
  const int64_t lda = s.ta == Trans::yes ? s.M : s.K, ldb = s.tb == Trans::yes ? s.K : s.N;
  auto call = [&] {
    if (direct != nullptr)
      direct(s.ta, s.tb, s.M, s.N, s.K, a.data(), lda, b.data(), ldb, c.data(), s.N, s.out);
    else
      sgemm(s.ta, s.tb, s.M, s.N, s.K, a.data(), lda, b.data(), ldb, c.data(), s.N, s.out);
  };
  call();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    Timer t;
    call();
    best = std::min(best, t.seconds());
  }
  return best;
}

std::vector<Shape> shapes(const ModelConfig& m, int64_t T) {
  const int64_t C = m.d_model, F = m.ffn_hidden, V = m.vocab_size, Q = m.qkv_dim();
  std::vector<Shape> out;
  auto linear = [&](const std::string& name, int64_t IC, int64_t OC) {
    out.push_back({name + " fwd", Trans::no, Trans::yes, T, OC, IC, Out::assign, false});
    out.push_back({name + " dX", Trans::no, Trans::no, T, IC, OC, Out::assign, false});
    out.push_back({name + " dW", Trans::yes, Trans::no, OC, IC, T, Out::add, false});
  };
  linear("qkv", C, Q);
  linear("o", C, C);
  linear("gate_up", C, 2 * F);
  linear("down", F, C);
  linear("lm_head", C, V);
  const int64_t D = m.head_dim();
  out.push_back({"tile Q·Kᵀ", Trans::no, Trans::yes, 64, 64, D, Out::assign, true});
  out.push_back({"tile P·V", Trans::no, Trans::no, 64, D, 64, Out::add, true});
  out.push_back({"tile dV += Pᵀ·dO", Trans::yes, Trans::no, 64, D, 64, Out::add, true});
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GEMM rates of a model's shapes: fp32, bf16 emulated, bf16 oneDNN"};
  std::string config_path = "configs/bench.toml";
  int rounds = 3, reps = 10;
  app.add_option("--config", config_path,
                 "Model configuration (its model and train.microbatch_size × seq_len)");
  app.add_option("--rounds", rounds, "Interleaved rounds; each prints its rate per side");
  app.add_option("--reps", reps, "Timed calls per shape, side and round (the best is kept)");
  CLI11_PARSE(app, argc, argv);
  const Config cfg = load_config(config_path, {});
  const int64_t tokens = cfg.train.microbatch_size * cfg.train.seq_len;
  std::vector<Side> sides = {{"fp32", MatmulPrecision::fp32, Bf16Kernel::emulated},
                             {"bf16_emulated", MatmulPrecision::bf16, Bf16Kernel::emulated}};
  if (onednn_bf16_unavailable().empty()) {
    sides.push_back({"bf16_onednn", MatmulPrecision::bf16, Bf16Kernel::onednn});
    set_bf16_kernel(Bf16Kernel::onednn);
    if (amx::unavailable_reason().empty())
      sides.push_back({"bf16_onednn_matmul", MatmulPrecision::bf16, Bf16Kernel::onednn, onednn::matmul_bf16});
  } else {
    std::printf("# bf16 oneDNN not measured: %s\n", onednn_bf16_unavailable().c_str());
  }
  {
    const MatmulPrecisionGuard g(MatmulPrecision::bf16);
    std::printf("# %d threads; bf16 matmul: %s\n", omp_get_max_threads(), bf16_kernel_description().c_str());
  }
  const int threads = omp_get_max_threads();
  std::printf("%-22s %5s %5s %5s %-18s round GFLOP/s\n", "shape", "M", "N", "K", "side");
  for (const Shape& s : shapes(cfg.model, tokens)) {
    omp_set_num_threads(s.one_thread ? 1 : threads);
    for (int r = 0; r < rounds; ++r) {
      for (const Side& side : sides) {
        if (side.direct != nullptr && !amx::fits(s.M, s.N, s.K)) continue;
        const MatmulPrecisionGuard g(side.precision);
        set_bf16_kernel(side.kernel);
        const double sec = best_seconds(s, reps, side.direct);
        std::printf("%-22s %5lld %5lld %5lld %-18s %d %8.1f\n", s.what.c_str(), static_cast<long long>(s.M),
                    static_cast<long long>(s.N), static_cast<long long>(s.K), side.name, r + 1,
                    2.0 * static_cast<double>(s.M * s.N * s.K) / sec / 1e9);
      }
    }
  }
  return 0;
}

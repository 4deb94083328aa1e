// meshtrain_bench: full training steps of the Llama of a config (zero_grads,
// forward, backward, global-norm clip, AdamW) on a fixed pseudo-random batch,
// against this machine's SGEMM rate measured in the same run (docs/BENCHMARKS.md, "Definitions").
//
// Order of a run: warm-up steps; SGEMM rates; timed steps (peak memory is taken
// over these); SGEMM rates again; then, with a fresh model built with
// ModelOptions::profile, a separate profiled pass for the per-kernel shares, so
// that the clock reads of profiling do not perturb the timed steps.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "core/memory.h"
#include "core/philox.h"
#include "core/threads.h"
#include "core/timer.h"
#include "cost/flops.h"
#include "gemm_rate.h"
#include "model/llama.h"
#include "ops/gemm.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "report.h"

namespace mt::bench {
namespace {

struct Options {
  std::string config = "configs/bench.toml";
  std::string precision = "fp32";
  int threads = 2;
  int steps = 5;
  int warmup = 2;
  int profile_steps = 2;
  double gemm_seconds = 0.4;
  std::string json;
};

// A fixed batch: B rows of T + 1 pseudo-random token ids; the targets are the
// inputs shifted by one.
struct Batch {
  std::vector<int32_t> inputs, targets;
};

Batch make_batch(int64_t B, int64_t T, int64_t vocab) {
  Batch b;
  b.inputs.resize(static_cast<size_t>(B * T));
  b.targets.resize(b.inputs.size());
  const PhiloxKey key = philox_key(20240601, "bench.tokens");
  for (int64_t r = 0; r < B; ++r) {
    std::vector<int32_t> row(static_cast<size_t>(T + 1));
    for (int64_t t = 0; t <= T; ++t) {
      const double u = philox_uniform(key, static_cast<uint64_t>(r * (T + 1) + t));
      row[static_cast<size_t>(t)] = static_cast<int32_t>(u * static_cast<double>(vocab));
    }
    for (int64_t t = 0; t < T; ++t) {
      b.inputs[static_cast<size_t>(r * T + t)] = row[static_cast<size_t>(t)];
      b.targets[static_cast<size_t>(r * T + t)] = row[static_cast<size_t>(t + 1)];
    }
  }
  return b;
}

// Weight decay where the parameter table says so (as the trainer does).
std::vector<DecayRange> decay_ranges(const ParamTable& t) {
  std::vector<DecayRange> r;
  for (const auto& s : t.specs) {
    if (!r.empty() && r.back().decay == s.weight_decay)
      r.back().numel += s.numel;
    else
      r.push_back({s.offset, s.numel, s.weight_decay});
  }
  return r;
}

// One model with its optimizer, stepping on one batch.
class Stepper {
 public:
  Stepper(const Config& cfg, bool profile)
      : tc_(cfg.train),
        model_(cfg.model, model_options(cfg.train, profile)),
        opt_(model_.num_params(),
             OptimizerOptions{OptimizerKind::adamw, {tc_.beta1, tc_.beta2, tc_.adam_eps, tc_.weight_decay}},
             decay_ranges(model_.param_table())) {
    model_.init(tc_.seed);
  }

  // One full training step; returns the mean loss. optimizer_seconds (if not
  // null) gets the time of zero_grads + gradient norm + clip + AdamW added.
  double step(const Batch& b, double* optimizer_seconds) {
    const int64_t B = tc_.batch_size, T = tc_.seq_len, mb = tc_.microbatch_size;
    Timer t0;
    model_.zero_grads();
    double opt_s = t0.seconds();
    const float dloss = 1.0f / static_cast<float>(B * T);  // every target is valid
    double loss_sum = 0;
    {
      // As train_step: the weights stay put until the update, so bf16 rounds each once.
      const Bf16WeightBits weight_bits({{model_.params(), static_cast<size_t>(model_.num_params())}});
      for (int64_t r = 0; r < B; r += mb) {
        const size_t off = static_cast<size_t>(r * T);
        loss_sum += model_.forward(b.inputs.data() + off, b.targets.data() + off, mb, T);
        model_.backward(dloss);
      }
    }
    Timer t1;
    const double gnorm = std::sqrt(sum_squares(model_.grads(), model_.num_params()));
    MT_REQUIRE(std::isfinite(gnorm) && std::isfinite(loss_sum), Error, "non-finite loss (", loss_sum,
               ") or gradient norm (", gnorm, ")");
    clip_by_norm(model_.grads(), model_.num_params(), gnorm, tc_.grad_clip);
    opt_.step(model_.params(), model_.grads(), tc_.lr);
    opt_s += t1.seconds();
    if (optimizer_seconds != nullptr) *optimizer_seconds += opt_s;
    return loss_sum / static_cast<double>(B * T);
  }

  Llama& model() { return model_; }

 private:
  static ModelOptions model_options(const TrainConfig& tc, bool profile) {
    ModelOptions mo;
    mo.max_batch = tc.microbatch_size;
    mo.max_seq = tc.seq_len;
    mo.recompute = parse_recompute(tc.recompute, tc.recompute_modules);
    mo.profile = profile;
    return mo;
  }

  const TrainConfig& tc_;
  Llama model_;
  Optimizer opt_;  // AdamW
};

BenchResult run(const Options& o) {
  MT_REQUIRE(o.steps >= 1, ConfigError, "--steps (", o.steps, ") must be at least 1");
  MT_REQUIRE(o.warmup >= 0 && o.profile_steps >= 0, ConfigError, "--warmup (", o.warmup,
             ") and --profile-steps (", o.profile_steps, ") must not be negative");
  MT_REQUIRE(o.threads >= 1, ConfigError, "--threads (", o.threads, ") must be at least 1");
  Config cfg = load_config(o.config, {});
  cfg.validate();
  set_num_threads(o.threads);
  // Every product of the run, the GEMM rates included (docs/MODEL.md "Precision").
  const MatmulPrecisionGuard precision(parse_matmul_precision(o.precision, "--precision"));

  BenchResult r;
  const TrainConfig& tc = cfg.train;
  r.config_path = o.config;
  r.precision = matmul_precision_name(matmul_precision());
  r.matmul =
      matmul_precision() == MatmulPrecision::bf16 ? "bf16 " + bf16_kernel_description() : "OpenBLAS sgemm";
  r.ceiling_name = matmul_ceiling_name();
  r.threads = num_threads();
  r.batch = tc.batch_size;
  r.seq_len = tc.seq_len;
  r.microbatch = tc.microbatch_size;
  r.matmul_params = matmul_params(cfg.model);
  r.flops_per_token = train_flops_per_token(cfg.model, tc.seq_len);
  const Batch batch = make_batch(tc.batch_size, tc.seq_len, cfg.model.vocab_size);
  {
    Stepper s(cfg, false);
    r.num_params = s.model().num_params();
    for (int i = 0; i < o.warmup; ++i)
      r.losses.push_back(s.step(batch, nullptr));
    r.gemm_before = measure_gemm_rates(cfg.model, tc.microbatch_size * tc.seq_len, o.gemm_seconds);
    MemoryTracker::reset_peaks();
    for (int i = 0; i < o.steps; ++i) {
      Timer t;
      r.losses.push_back(s.step(batch, nullptr));
      r.step_seconds.push_back(t.seconds());
    }
    const MemStats mem = MemoryTracker::stats();
    r.mem_peak = mem.peak;
    r.mem_peak_total = mem.total_peak;
    r.gemm_after = measure_gemm_rates(cfg.model, tc.microbatch_size * tc.seq_len, o.gemm_seconds);
  }
  if (o.profile_steps > 0) {
    Stepper s(cfg, true);
    s.step(batch, nullptr);  // warm-up, not counted
    s.model().kernel_times().clear();
    double opt_s = 0;
    Timer t;
    for (int i = 0; i < o.profile_steps; ++i)
      s.step(batch, &opt_s);
    r.profiled_seconds = t.seconds();
    r.profiled_steps = o.profile_steps;
    double attributed = opt_s;
    const KernelTimes& kt = s.model().kernel_times();
    for (int k = 0; k < static_cast<int>(Kernel::count_); ++k) {
      const double sec = kt.seconds[static_cast<size_t>(k)];
      r.kernel_seconds.emplace_back(kernel_name(static_cast<Kernel>(k)), sec);
      attributed += sec;
    }
    r.kernel_seconds.emplace_back("optimizer", opt_s);
    r.kernel_seconds.emplace_back("unattributed", r.profiled_seconds - attributed);
  }
  return r;
}

}  // namespace
}  // namespace mt::bench

int main(int argc, char** argv) {
  mt::bench::Options o;
  CLI::App app{"meshtrain_bench: training steps vs this machine's SGEMM rate (docs/BENCHMARKS.md)"};
  app.add_option("--config", o.config, "TOML config ([model] and [train] are used)")->capture_default_str();
  app.add_option("--precision", o.precision,
                 "Matrix products: fp32 | bf16 (the kernel: MESHTRAIN_BF16_MATMUL, docs/MODEL.md)")
      ->capture_default_str();
  app.add_option("--threads", o.threads, "OpenMP threads (kernels and OpenBLAS)")->capture_default_str();
  app.add_option("--steps", o.steps, "Timed steps")->capture_default_str();
  app.add_option("--warmup", o.warmup, "Warm-up steps before the timed ones")->capture_default_str();
  app.add_option("--profile-steps", o.profile_steps, "Steps of the separate profiled pass (0: none)")
      ->capture_default_str();
  app.add_option("--gemm-seconds", o.gemm_seconds, "Seconds per SGEMM shape per measurement")
      ->capture_default_str();
  app.add_option("--json", o.json, "Also write the results as JSON to this file");
  CLI11_PARSE(app, argc, argv);
  try {
    const mt::bench::BenchResult r = mt::bench::run(o);
    mt::bench::print_table(r);
    if (!o.json.empty()) mt::bench::write_json(r, o.json);
  } catch (const mt::Error& err) {
    std::fprintf(stderr, "meshtrain_bench: error: %s\n", err.what());
    return 1;
  } catch (const std::exception& err) {
    std::fprintf(stderr, "meshtrain_bench: internal error: %s\n", err.what());
    return 2;
  }
  return 0;
}

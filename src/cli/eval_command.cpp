// meshtrain eval: the mean next-token loss of a model directory over a token
// file, in one process (the reference) or under mpirun on any layout (the
// training run's evaluation, train_step.h validation_loss); with
// --position-buckets, also the mean loss by position in the window (one process:
// the long-context study of docs/BENCHMARKS.md reads how the loss grows past the
// training length).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

#include "cli/commands.h"
#include "cli/layout_command.h"
#include "comm/runtime.h"
#include "core/error.h"
#include "core/threads.h"
#include "data/token_file.h"
#include "mesh/mesh.h"
#include "ops/cross_entropy.h"
#include "ops/gemm.h"
#include "parallel/context_parallel.h"
#include "train/evaluate.h"
#include "cost/memory_estimate.h"
#include "train/model_io.h"
#include "train/run_mesh.h"
#include "train/train_model.h"
#include "train/train_step.h"

namespace mt {

namespace {

void check_loss(double loss, const EvalArgs& a) {
  MT_REQUIRE(std::isfinite(loss), Error, "the loss of ", a.model, " on ", a.data, " is ", loss,
             ", not finite: the model's weights or outputs overflow");
}

// Loss sums and token counts per position bucket: bucket b holds the window
// positions [b·T/N, (b+1)·T/N), position t being the prediction of target t
// (the token at offset t + 1 of the window).
class PositionBuckets {
 public:
  PositionBuckets(int64_t seq_len, int64_t n) : width_(seq_len / n), sum_(n, 0.0), count_(n, 0) {}

  // Adds the per-token losses of a forward's logits [B, T, V] (targets [B, T]).
  void add(const float* logits, const int32_t* targets, int64_t B, int64_t T, int64_t V) {
    losses_.resize(static_cast<size_t>(B * T));
    lse_.resize(losses_.size());
    cross_entropy_forward(losses_.data(), lse_.data(), logits, targets, B * T, V, kIgnoreIndex);
    for (int64_t i = 0; i < B * T; ++i) {
      if (targets[i] == kIgnoreIndex) continue;
      const auto b = static_cast<size_t>((i % T) / width_);
      sum_[b] += losses_[static_cast<size_t>(i)];
      count_[b] += 1;
    }
  }

  void print() const {
    for (size_t b = 0; b < sum_.size(); ++b) {
      const auto first = static_cast<long long>(b) * width_;
      std::printf("bucket %lld %lld %lld %.6f\n", first, first + width_ - 1,
                  static_cast<long long>(count_[b]),
                  count_[b] > 0 ? sum_[b] / static_cast<double>(count_[b]) : 0.0);
    }
  }

 private:
  int64_t width_;
  std::vector<double> sum_;
  std::vector<int64_t> count_;
  std::vector<float> losses_, lse_;
};

void check_position_buckets(const EvalArgs& a, int64_t T) {
  MT_REQUIRE(a.position_buckets >= 0, ConfigError, "--position-buckets (", a.position_buckets,
             ") must be >= 0 (0: no buckets)");
  MT_REQUIRE(a.position_buckets == 0 || (a.position_buckets <= T && T % a.position_buckets == 0), ConfigError,
             "--position-buckets (", a.position_buckets, ") must divide the window length (", T, ")");
}

// eval's own flags, checked against the model and named as the user gave them
// (before the run's configuration restates them as train.* keys); returns the
// window length.
int64_t checked_window(const EvalArgs& a, const ModelConfig& model) {
  MT_REQUIRE(a.seq_len >= 0, ConfigError, "--seq-len (", a.seq_len,
             ") must be positive (or 0: the model's max_seq_len, ", model.max_seq_len, ")");
  const int64_t T = a.seq_len > 0 ? a.seq_len : model.max_seq_len;
  MT_REQUIRE(T <= model.max_seq_len, ConfigError, "--seq-len (", T,
             ") must not exceed the model's max_seq_len (", model.max_seq_len, ")");
  MT_REQUIRE(a.max_windows >= 0, ConfigError, "--max-windows (", a.max_windows,
             ") must not be negative (0: every window)");
  check_thread_count("--threads", a.threads);
  if (a.cp > 1 && a.cp <= INT32_MAX) cp::check_zigzag(T, static_cast<int>(a.cp), "--seq-len", "--cp");
  check_position_buckets(a, T);
  return T;
}

// The run's configuration: the model's, the layout flags, and the windows
// evaluated `microbatch` at a time on every replica (every dp replica
// evaluates every window, as a training run's evaluation does).
Config eval_config(const EvalArgs& a, int world_size) {
  const ModelConfig model = read_model_config(a.model);
  Config cfg =
      layout_config(model, {a.dp, a.tp, a.pp, a.cp}, checked_window(a, model), /*microbatch=*/4, world_size);
  cfg.train.eval_windows = a.max_windows;
  MT_REQUIRE(a.position_buckets == 0, ConfigError, "--position-buckets (", a.position_buckets,
             ") runs in one process only: drop it or the layout flags and mpirun");
  return cfg;
}

// The token file of --data, whose ids must lie inside the model's vocabulary.
TokenFile open_eval_data(const EvalArgs& a, int64_t vocab_size) {
  TokenFile file = TokenFile::open(a.data);
  MT_REQUIRE(file.vocab_size() <= vocab_size, ConfigError, a.data, " was written for a ", file.vocab_size(),
             "-token vocabulary but the model has ", vocab_size);
  return file;
}

int eval_on_layout(const EvalArgs& a, CommRuntime& runtime) {
  Group world = runtime.world();
  Config cfg;
  return run_on_every_rank(
      world, [&] { cfg = eval_config(a, world.size()); },
      [&] {
        const TokenFile file = open_eval_data(a, cfg.model.vocab_size);
        const RunMesh mesh = make_run_mesh(cfg, &world);
        TrainModel model = load_on_layout(cfg, a.model, a.threads, runtime.local_ranks(), mesh);
        const double loss = validation_loss(model, mesh, cfg.train, file);
        check_loss(loss, a);
        if (world.rank() == 0) std::printf("loss %.6f\n", loss);
      });
}

}  // namespace

int run_eval_command(const EvalArgs& a) {
  // Checked before MPI starts, so every rank refuses a bad name alike.
  const MatmulPrecisionGuard precision(parse_matmul_precision(a.precision, "--precision"));
  CommRuntime runtime(nullptr, nullptr);  // a process started without mpirun is a world of one
  if (a.dp * a.tp * a.pp * a.cp > 1 || runtime.world().size() > 1) return eval_on_layout(a, runtime);
  const ModelConfig cfg = read_model_config(a.model);
  const int64_t T = checked_window(a, cfg);
  set_num_threads(a.threads > 0 ? static_cast<int>(a.threads) : hardware_threads());
  const TokenFile file = open_eval_data(a, cfg.vocab_size);
  ModelOptions mo;
  mo.max_batch = 4;
  mo.max_seq = T;
  require_fits(estimate_eval_memory(cfg, mo.max_batch, T), 1, available_memory_bytes());
  Llama model(cfg, mo);
  load_model_dir(a.model, model);
  std::optional<PositionBuckets> buckets;
  if (a.position_buckets > 0) buckets.emplace(T, a.position_buckets);
  const LossForward forward = [&](const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T_) {
    const double sum = model.forward(inputs, targets, B, T_);
    if (buckets) buckets->add(model.logits(), targets, B, T_, cfg.vocab_size);
    return sum;
  };
  const double loss = evaluate_loss(forward, file, T, a.max_windows, mo.max_batch);
  std::printf("loss %.6f\n", loss);
  if (buckets) buckets->print();
  check_loss(loss, a);
  return 0;
}

}  // namespace mt

#include "train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "core/memory.h"
#include "core/threads.h"
#include "core/timer.h"
#include "data/sampler.h"
#include "data/token_file.h"
#include "model/llama.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/schedule.h"
#include "parallel/context_parallel.h"
#include "train/evaluate.h"
#include "train/flops.h"
#include "train/layout.h"
#include "train/model_io.h"
#include "train/pipeline.h"
#include "train/run_support.h"

namespace mt {

namespace fs = std::filesystem;

void check_training_data(const Config& cfg) {
  const std::string train_path = (fs::path(cfg.data.dir) / "train.bin").string();
  const TokenFile train_file = TokenFile::open(train_path);
  MT_REQUIRE(train_file.vocab_size() <= cfg.model.vocab_size, ConfigError, train_path, " was written for a ",
             train_file.vocab_size(), "-token vocabulary but model.vocab_size is ", cfg.model.vocab_size);
}

RunResult run_training(const Config& cfg, const RunOptions& opts, const Group* world) {
  cfg.validate();
  const TrainConfig& tc = cfg.train;
  set_num_threads(tc.threads > 0 ? static_cast<int>(tc.threads)
                                 : std::max(1, hardware_threads() / std::max(1, opts.local_ranks)));
  RunLayout lay = make_run_layout(cfg, world);
  const bool lead = lay.rank == 0;  // logs, metrics and checkpoints come from rank 0

  const std::string train_path = (fs::path(cfg.data.dir) / "train.bin").string();
  const std::string val_path = (fs::path(cfg.data.dir) / "val.bin").string();
  const TokenFile train_file = TokenFile::open(train_path);
  MT_REQUIRE(train_file.vocab_size() <= cfg.model.vocab_size, ConfigError, train_path, " was written for a ",
             train_file.vocab_size(), "-token vocabulary but model.vocab_size is ", cfg.model.vocab_size);
  const bool do_eval = tc.eval_every > 0 && fs::exists(val_path);
  TokenFile val_file;
  if (do_eval) val_file = TokenFile::open(val_path);

  ModelOptions mo;
  mo.max_batch = tc.microbatch_size;
  mo.max_seq = tc.seq_len / lay.cp;  // this rank's tokens of each sequence
  mo.cp = lay.cp_group();
  mo.cp_ring = lay.cp_ring;
  mo.recompute = tc.recompute;
  mo.profile = opts.profile;
  mo.tp = lay.tp_group();
  mo.tp_kv = lay.tp_kv_group();
  mo.sp = lay.sp;
  // This rank's model chunks: one, or one per virtual pipeline stage it holds.
  std::vector<std::unique_ptr<Llama>> chunks;
  std::vector<std::unique_ptr<AdamW>> optims;
  std::vector<Llama*> chunk_ptrs;
  for (int c = 0; c < lay.virtual_stages; ++c) {
    mo.stage = lay.chunk_stage(c);
    chunks.push_back(std::make_unique<Llama>(cfg.model, mo, lay.make_store(cfg, mo.stage)));
    Llama& m = *chunks.back();
    if (opts.init_from.empty())
      m.init(tc.seed);
    else
      load_model_dir(opts.init_from, m);
    ParamStore& st = m.store();
    optims.push_back(std::make_unique<AdamW>(st.local_numel(),
                                             AdamWOptions{tc.beta1, tc.beta2, tc.adam_eps, tc.weight_decay},
                                             st.local_decay_ranges()));
    chunk_ptrs.push_back(&m);
  }
  Llama& model = *chunks.front();
  const bool pipelined = lay.stages.size() > 1;
  // The chunk holding the embedding or the last stage's tied copy of it.
  ParamStore* tied_store = nullptr;
  for (auto& c : chunks) {
    if (cfg.model.tie_embeddings && (c->has_embed() || c->has_head())) tied_store = &c->store();
  }
  MT_REQUIRE(opts.trace_path.empty() || pipelined, ConfigError,
             "--trace records the pipeline's stages: it needs parallel.pp > 1");
  std::unique_ptr<pp::Schedule> schedule;
  std::unique_ptr<PipelineExecutor> executor;
  if (pipelined) {
    const int nmb = static_cast<int>(tc.batch_size / (lay.dp * tc.microbatch_size));
    schedule = std::make_unique<pp::Schedule>(
        pp::make_schedule(pp::parse_schedule_kind(cfg.parallel.schedule), lay.pp, lay.virtual_stages, nmb));
    executor = std::make_unique<PipelineExecutor>(*schedule, lay.pp_rank, *lay.pp_group(), chunk_ptrs,
                                                  tc.microbatch_size, tc.seq_len / lay.cp);
  }
  int64_t num_params = 0;  // the whole model's
  for (const auto& s : make_param_table(cfg.model).specs)
    num_params += s.numel;
  const LrSchedule sched{tc.lr, tc.min_lr, tc.warmup_steps, tc.steps};

  RunResult result;
  result.sgemm_gflops = lay.job_sgemm_gflops();
  const double flops_per_token = train_flops_per_token(cfg.model, tc.seq_len);
  if (!opts.quiet && lead) {
    if (lay.world_size > 1) std::printf("%s", lay.describe().c_str());
    std::printf(
        "model: %lld parameters (%lld in matrix products), %lld layers, d_model %lld; %d threads; "
        "SGEMM ceiling %.1f GFLOP/s\n",
        static_cast<long long>(num_params), static_cast<long long>(matmul_params(cfg.model)),
        static_cast<long long>(cfg.model.n_layers), static_cast<long long>(cfg.model.d_model), num_threads(),
        result.sgemm_gflops);
    std::fflush(stdout);
  }

  MetricsWriter metrics(lead ? opts.metrics_path : std::string());
  const int64_t B = tc.batch_size, T = tc.seq_len, mb = tc.microbatch_size;
  const int64_t Tl = T / lay.cp;  // this rank's tokens of each sequence (the zigzag share under cp)
  // This data-parallel rank's contiguous slice of the global batch.
  const int64_t rows = B / lay.dp, row_begin = lay.dp_rank * rows;
  std::vector<int32_t> inputs(static_cast<size_t>(rows * T)), targets(inputs.size());
  std::vector<int32_t> local_in(static_cast<size_t>(lay.cp > 1 ? rows * Tl : 0)), local_tg(local_in.size());
  int64_t bad_streak = 0;
  const Fault fault = read_fault();

  // The loss sum of microbatch (in, tg) [b, t] over this rank's tokens: through
  // the pipeline's stages or the one model.
  auto local_loss = [&](const int32_t* in, const int32_t* tg, int64_t b, int64_t t) {
    return pipelined ? pipeline_forward_loss(chunk_ptrs, lay.pp_rank, *lay.pp_group(), in, tg, b, t)
                     : model.forward(in, tg, b, t);
  };
  std::vector<int32_t> eval_in, eval_tg;
  auto evaluate_now = [&](int64_t step) {
    const double v = evaluate_loss(
        [&](const int32_t* in, const int32_t* tg, int64_t b, int64_t t) {
          if (lay.cp == 1) return local_loss(in, tg, b, t);
          eval_in.resize(static_cast<size_t>(b * t / lay.cp));
          eval_tg.resize(eval_in.size());
          cp::zigzag_slice(eval_in.data(), in, b, t, 1, lay.cp, lay.cp_rank);
          cp::zigzag_slice(eval_tg.data(), tg, b, t, 1, lay.cp, lay.cp_rank);
          double sum = local_loss(eval_in.data(), eval_tg.data(), b, t / lay.cp);
          lay.cp_group()->all_reduce(&sum, 1, "eval loss");
          return sum;
        },
        val_file, T, tc.eval_windows, mb);
    result.val_losses.emplace_back(step, v);
    metrics.write({{"step", step}, {"val_loss", v}});
    if (!opts.quiet && lead) std::printf("step %5lld | val loss %.4f\n", static_cast<long long>(step), v);
  };

  for (int64_t step = 0; step < tc.steps; ++step) {
    Timer timer;
    MemoryTracker::reset_peaks();
    const double lr = sched.at(step);
    lay.set_step(step);
    inject_fault(fault, lay.rank, step);
    sample_rows(train_file, tc.seed, step, B, T, row_begin, row_begin + rows, inputs.data(), targets.data());
    std::vector<int32_t>& in = lay.cp > 1 ? local_in : inputs;  // this rank's tokens
    std::vector<int32_t>& tg = lay.cp > 1 ? local_tg : targets;
    if (lay.cp > 1) {  // this rank's zigzag share of every sequence
      cp::zigzag_slice(in.data(), inputs.data(), rows, T, 1, lay.cp, lay.cp_rank);
      cp::zigzag_slice(tg.data(), targets.data(), rows, T, 1, lay.cp, lay.cp_rank);
    }
    int64_t valid = 0;
    for (int32_t& t : tg) {
      if (t == cfg.data.ignore_id) t = kIgnoreIndex;
      valid += t != kIgnoreIndex;
    }
    lay.sum_over_dp(&valid);  // the loss is a mean over the GLOBAL batch's valid tokens
    for (auto& c : chunks)
      c->store().begin_step(rows / mb);
    double loss_sum = 0.0;
    if (valid > 0) {
      const float dloss = static_cast<float>(1.0 / static_cast<double>(valid));
      if (pipelined) {
        loss_sum = executor->run(in.data(), tg.data(), dloss);
      } else {
        for (int64_t r = 0; r < rows; r += mb) {
          const size_t off = static_cast<size_t>(r * Tl);
          model.store().begin_microbatch(r / mb);
          loss_sum += model.forward(in.data() + off, tg.data() + off, mb, Tl);
          model.backward(dloss);
        }
      }
    }
    for (auto& c : chunks)
      c->store().finish_grads();
    lay.sum_tied_embedding(tied_store);
    lay.sum_over_pp(&loss_sum);  // only the last stage has a loss
    lay.sum_over_dp(&loss_sum);
    const double loss = valid > 0 ? loss_sum / static_cast<double>(valid) : 0.0;
    double sum_sq = 0.0;
    for (auto& c : chunks)
      sum_sq += c->store().grad_sum_squares();
    lay.sum_over_tp(&sum_sq);
    lay.sum_over_pp(&sum_sq);
    const double gnorm = std::sqrt(sum_sq);

    StepStats s;
    s.step = step;
    s.loss = loss;
    s.lr = lr;
    s.grad_norm = gnorm;
    s.tokens = valid;
    if (!std::isfinite(loss) || !std::isfinite(gnorm)) {
      s.skipped = true;
      ++bad_streak;
      if (lead)
        std::fprintf(
            stderr,
            "step %lld: loss %g, gradient norm %g is not finite: update skipped (%lld of at most %lld "
            "in a row)\n",
            static_cast<long long>(step), loss, gnorm, static_cast<long long>(bad_streak),
            static_cast<long long>(tc.max_bad_steps));
      MT_REQUIRE(bad_streak < tc.max_bad_steps, Error, "stopping at step ", step, ": ", bad_streak,
                 " consecutive steps with a non-finite loss or gradient norm (train.max_bad_steps = ",
                 tc.max_bad_steps, ")");
    } else {
      bad_streak = 0;
      for (size_t c = 0; c < chunks.size(); ++c) {
        ParamStore& st = chunks[c]->store();
        clip_by_norm(st.local_grads(), st.local_numel(), gnorm, tc.grad_clip);
        optims[c]->step(st.local_params(), st.local_grads(), lr);
        st.after_update();
      }
    }
    s.step_time_s = timer.seconds();
    s.tokens_per_s = static_cast<double>(B * T) / s.step_time_s;
    s.mfu = s.tokens_per_s * flops_per_token / (result.sgemm_gflops * 1e9);
    s.mem_peak_bytes = MemoryTracker::stats().total_peak;
    result.steps.push_back(s);
    nlohmann::json comm = nlohmann::json::object();
    for (const auto& [key, bytes] : lay.comm_bytes(step))
      comm[key] = bytes;
    const double hidden = lay.overlap_hidden(model.store());
    const MemStats mem = MemoryTracker::stats();
    nlohmann::json mem_by_kind = nlohmann::json::object();
    for (int k = 0; k < kNumMemKinds; ++k) {
      mem_by_kind[std::string(mem_kind_name(static_cast<MemKind>(k)))] = mem.peak[static_cast<size_t>(k)];
    }
    // Pipeline: each stage's idle share of the step (the bubble), gathered over pp.
    std::vector<double> idle_by_stage;
    if (pipelined) {
      const double mine = executor->wall_s() > 0 ? 1.0 - executor->busy_s() / executor->wall_s() : 0.0;
      idle_by_stage.resize(static_cast<size_t>(lay.pp));
      lay.pp_group()->all_gather(&mine, idle_by_stage.data(), 1, ElemType::f64, "pp idle");
    }
    metrics.write({{"step", s.step},
                   {"pp_idle", idle_by_stage},
                   {"comm_bytes", comm},
                   {"overlap_hidden", hidden},
                   {"mem_peak_by_kind", mem_by_kind},
                   {"loss", s.loss},
                   {"lr", s.lr},
                   {"grad_norm", s.grad_norm},
                   {"tokens", s.tokens},
                   {"step_time_s", s.step_time_s},
                   {"tokens_per_s", s.tokens_per_s},
                   {"mfu", s.mfu},
                   {"mem_peak_bytes", s.mem_peak_bytes},
                   {"skipped", s.skipped}});
    if (!opts.quiet && lead && (step % tc.log_every == 0 || step + 1 == tc.steps)) {
      std::printf(
          "step %5lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s | MFU %.2f | peak mem %.1f MiB%s\n",
          static_cast<long long>(step), loss, lr, gnorm, s.tokens_per_s, s.mfu,
          static_cast<double>(s.mem_peak_bytes) / (1 << 20), s.skipped ? " | SKIPPED" : "");
      std::fflush(stdout);
    }
    if (opts.explain && step == 0) {  // collective: every rank's calls of the first step, rank 0 prints
      const std::string report = lay.explain(0);
      if (lead) {
        std::printf("--explain: every collective of step 0, rank by rank\n%s", report.c_str());
        std::fflush(stdout);
      }
    }
    if (do_eval && (step + 1) % tc.eval_every == 0) evaluate_now(step);
  }
  if (do_eval && tc.steps % tc.eval_every != 0) evaluate_now(tc.steps - 1);
  if (!opts.trace_path.empty()) {
    const std::string json = lay.trace_json(executor->spans());  // collective
    if (lead) {
      AtomicFile f(opts.trace_path);
      f.write(json.data(), json.size());
      f.commit();
      if (!opts.quiet) std::printf("trace of the last step written to %s\n", opts.trace_path.c_str());
    }
  }
  if (opts.profile) {
    const KernelTimes& kt = model.kernel_times();
    for (int k = 0; k < static_cast<int>(Kernel::count_); ++k) {
      result.kernel_seconds.emplace_back(kernel_name(static_cast<Kernel>(k)),
                                         kt.seconds[static_cast<size_t>(k)]);
    }
  }
  if (!opts.save_dir.empty()) {
    save_model_dir(opts.save_dir, chunk_ptrs, lay.pp_group(), lead);  // gathered from any layout; one writer
    if (!opts.quiet && lead) std::printf("saved %s\n", opts.save_dir.c_str());
  }
  result.memory = MemoryTracker::stats();
  result.overlap_hidden = lay.overlap_hidden(model.store());
  if (!opts.quiet) {
    const std::string report = lay.memory_report(result.memory);  // collective
    if (lead) std::printf("%s", report.c_str());
    if (lead && lay.world_size > 1) std::printf("%s", lay.comm_summary().c_str());
    if (lead && lay.dp > 1 && cfg.parallel.zero <= 1) {
      std::printf("gradient all-reduce: %.0f%% of its time hidden behind the backward (last step)\n",
                  100 * result.overlap_hidden);
    }
  }
  return result;
}

}  // namespace mt

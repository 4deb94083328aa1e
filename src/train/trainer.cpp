#include "train/trainer.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_async.h"
#include "ckpt/checkpoint_meta.h"
#include "ckpt/checkpoint_read.h"
#include "comm/context.h"
#include "core/atomic_dir.h"
#include "core/error.h"
#include "core/threads.h"
#include "core/timer.h"
#include "core/trace_spans.h"
#include "cost/flops.h"
#include "cost/memory_estimate.h"
#include "data/token_file.h"
#include "ops/gemm.h"
#include "ops/kernels.h"
#include "optim/schedule.h"
#include "train/fingerprint.h"
#include "train/metrics_lines.h"
#include "train/model_io.h"
#include "train/preempt.h"
#include "train/progress.h"
#include "train/report.h"
#include "train/run_mesh.h"
#include "train/run_support.h"
#include "train/trace.h"
#include "train/train_model.h"
#include "train/train_step.h"

namespace mt {

namespace fs = std::filesystem;

namespace {
// A token file's ids are below its header's vocabulary (TokenFile::open checks
// every one), so a header within the model's vocabulary keeps every id inside it.
void check_vocab_of(const std::string& path, const ModelConfig& model) {
  const TokenFile file = TokenFile::open(path);
  MT_REQUIRE(file.vocab_size() <= model.vocab_size, ConfigError, path, " was written for a ",
             file.vocab_size(), "-token vocabulary but model.vocab_size is ", model.vocab_size);
}
}  // namespace

void check_training_data(const Config& cfg) {
  check_vocab_of((fs::path(cfg.data.dir) / "train.bin").string(), cfg.model);
  // val.bin is read when the run evaluates (train.eval_every > 0) and it exists (run_training).
  const std::string val_path = (fs::path(cfg.data.dir) / "val.bin").string();
  if (cfg.train.eval_every > 0 && fs::exists(val_path)) check_vocab_of(val_path, cfg.model);
}

std::vector<std::string> validate_run(Config& cfg, RunOptions& opts, int world_size, int rank) {
  cfg.validate();
  validate_mesh(mesh_sizes(cfg.parallel), world_size);
  check_training_data(cfg);
  // Before any allocation: the ranks on this machine must fit in its memory.
  require_fits(estimate_training_memory(cfg), opts.local_ranks, available_memory_bytes());
  check_thread_count("train.threads", cfg.train.threads);
  check_fault_fires(read_fault(), world_size,
                    cfg.train.checkpoint_dir);  // malformed, or one that cannot fire
  // Every output of the run, checked now so that one failing at the end costs none of the others (rank 0
  // writes them all).
  if (!opts.save_dir.empty() && rank == 0) check_dir_writable(opts.save_dir);
  if (!opts.metrics_path.empty() && rank == 0) check_file_writable(opts.metrics_path, "--metrics");
  if (!opts.fingerprint_path.empty() && rank == 0)
    check_file_writable(opts.fingerprint_path, "--fingerprint");
  // The fingerprint hashes activations on the host (train/fingerprint.h): a run on the host device only.
  MT_REQUIRE(opts.fingerprint_path.empty() || cfg.parsed().device == RunDevice::cpu, ConfigError,
             "--fingerprint with train.device = ", run_device_name(cfg.parsed().device),
             ": the fingerprint reads activations on the host; it needs train.device = cpu");
  MT_REQUIRE(opts.trace_steps.empty() || !opts.trace_path.empty(), ConfigError, "--trace-steps '",
             opts.trace_steps, "' chooses the steps of a trace: it needs --trace FILE");
  if (!opts.trace_path.empty()) {
    parse_trace_steps(opts.trace_steps, cfg.train.steps);  // its grammar and range
    if (rank == 0) check_file_writable(opts.trace_path, "--trace");
  }
  if (!cfg.train.checkpoint_dir.empty()) {
    check_checkpoint_dir(cfg.train.checkpoint_dir);  // every rank writes
    // Rank 0 prunes and points `latest`: one run per directory, refused by the holder's name.
    if (rank == 0) opts.checkpoint_lock = std::make_shared<DirLock>(cfg.train.checkpoint_dir);
    check_fresh_start(cfg.train.checkpoint_dir, opts.resume);
  }
  const ResumeChoice resume = resolve_resume(opts.resume, cfg.train.checkpoint_dir);  // once per process
  for (const std::string& w : resume.warnings)
    if (rank == 0) std::fprintf(stderr, "meshtrain: warning: %s\n", w.c_str());
  opts.resume_dir = resume.dir;
  if (!resume.dir.empty()) check_resume(resume.dir, cfg, world_size);
  MT_REQUIRE(resume.dir.empty() || opts.init_from.empty(), ConfigError,
             "--resume and --init-from both set the parameters: give one");
  if (opts.init_from.empty()) return {};
  return check_init_from(opts.init_from, cfg.model, cfg.train.init_allow);
}

namespace {
// A rollback to `step` (0: a fresh start) supersedes the newer checkpoints
// (ckpt/checkpoint.h supersede_newer); rank 0, which holds the lock. Returns `step`.
int64_t supersede(const Config& cfg, const RunMesh& mesh, int64_t step) {
  if (mesh.rank != 0) return step;
  const std::string note = supersede_newer(cfg.train.checkpoint_dir, step);
  if (!note.empty()) std::fprintf(stderr, "meshtrain: note: %s\n", note.c_str());
  return step;
}

// Loads the checkpoint validate_run resolved --resume to (if any) and replays
// its metrics lines; returns the step to run next (0 for a fresh start).
int64_t resume_run(const Config& cfg, const RunOptions& opts, const RunMesh& mesh, TrainModel& model,
                   MetricsWriter& metrics) {
  if (!opts.resume.empty()) require_same_resume(opts.resume_dir, mesh.rank, mesh.world());
  if (opts.resume_dir.empty()) return supersede(cfg, mesh, 0);
  const Timer timer;
  const std::unique_ptr<CheckpointReader> reader =
      open_resume(opts.resume, opts.resume_dir, cfg, model, mesh);
  if (!reader)
    return supersede(cfg, mesh, 0);  // --resume auto passed over every checkpoint (warnings said why)
  const ResumeState r = load_checkpoint(*reader, model, mesh);
  supersede(cfg, mesh, r.step);
  const double seconds = timer.seconds();
  for (const std::string& line : r.metrics_lines)
    if (!is_header_line(line)) metrics.write_line(line);  // this run wrote its own header
  // Each rank's figure, on rank 0: a rank reads the saved slices its layout
  // intersects (whole, for their checksums), not the checkpoint.
  std::vector<int64_t> read(static_cast<size_t>(mesh.world_size), r.bytes_checked);
  if (mesh.world() != nullptr)
    mesh.world()->all_gather(&r.bytes_checked, read.data(), 1, ElemType::i64, "resume: bytes read");
  if (!opts.quiet && mesh.rank == 0) {
    std::string per_rank;
    for (size_t i = 0; i < read.size(); ++i) {
      if (i > 0) per_rank += ' ';
      per_rank += std::to_string(read[i]);
    }
    std::printf(
        "resumed from %s (checked and read in %.3f s): step %lld next; tensor bytes read per rank: %s of the "
        "checkpoint's %lld\n",
        reader->dir().c_str(), seconds, static_cast<long long>(r.step), per_rank.c_str(),
        static_cast<long long>(r.tensor_bytes));
  }
  return r.step;
}

// The checkpoint side of the boundary after step `step` (its votes summed
// over the world): finalizes an async save once every rank's writer is done,
// saves on the cadence, at the last step and at an agreed stop. Returns the
// signal that stops the run after this step (0: none); every rank returns the
// same, since the votes are the same everywhere.
int checkpoint_boundary(CheckpointSaver& saver, const StepVotes& votes, int64_t step, const TrainConfig& tc,
                        const TrainModel& model, const RunMesh& mesh, MetricsWriter& metrics) {
  if (saver.in_flight() && votes.writer_done == mesh.world_size) saver.finish(metrics);
  const int stop = votes.sigterm > 0 ? SIGTERM : votes.sigusr1 > 0 ? SIGUSR1 : 0;
  const bool last = step + 1 == tc.steps;
  if (last || stop != 0 || (tc.checkpoint_every > 0 && (step + 1) % tc.checkpoint_every == 0))
    saver.save(step + 1, model, metrics);
  if (stop == 0) return 0;
  saver.finish(metrics);  // the stop's checkpoint is complete before anyone exits
  if (mesh.rank == 0) {
    const int64_t ranks = stop == SIGTERM ? votes.sigterm : votes.sigusr1;
    std::fprintf(stderr,
                 "meshtrain: %s received by %lld of %d rank(s): stopped after %lld of %lld steps; saved "
                 "checkpoint %s (continue with --resume auto)\n",
                 stop == SIGTERM ? "SIGTERM" : "SIGUSR1", static_cast<long long>(ranks), mesh.world_size,
                 static_cast<long long>(step + 1), static_cast<long long>(tc.steps),
                 (fs::path(tc.checkpoint_dir) / checkpoint_name(step + 1)).string().c_str());
  }
  return stop;
}

// The step's MFU against the ceiling (MfuCeiling: never above 1; a step
// faster than it raises it) and the time left.
void headline_figures(StepStats& s, MfuCeiling& ceiling, double flops_per_token, const Progress& progress,
                      int64_t first_step) {
  s.mfu = ceiling.mfu(s.tokens_per_s * flops_per_token / 1e9);
  s.mfu_ceiling_gflops = ceiling.gflops();
  s.mfu_ceiling = ceiling.source();
  s.eta_s = progress.eta_s(s.step);
  s.first_estimate = s.step == first_step + 1;
}

void keep_save_timings(const CheckpointSaver& saver, RunResult& result) {
  for (const SaveTiming& t : saver.timings()) {
    result.save_blocked_s.push_back(t.blocked_s);
    result.save_write_s.push_back(t.write_s);
  }
}

}  // namespace

namespace {

// Under a device other than the host, the crossings between the device and
// the host since the previous step's report (that step's evaluation and
// checkpoint included), printed by rank 0 after the last step (`print`), one
// line per label (number and bytes each way): the list docs/ARCHITECTURE.md
// "The kernel seam" derives, which tests/dist/fake_device.sh holds them to.
void report_crossings(RunDevice device, bool print, int64_t step) {
  if (device == RunDevice::cpu) return;
  if (!print) return reset_crossing_counts();  // each step's count starts from zero
  for (const auto& [label, n] : crossing_counts()) {
    std::fprintf(stderr, "crossings step %lld %s: to_host %lld %lld bytes, from_host %lld %lld bytes\n",
                 static_cast<long long>(step), label.c_str(), static_cast<long long>(n.to_host),
                 static_cast<long long>(n.to_host_bytes), static_cast<long long>(n.from_host),
                 static_cast<long long>(n.from_host_bytes));
  }
  reset_crossing_counts();
}

// train.threads, or this machine's cores over the ranks on it.
void set_run_threads(const TrainConfig& tc, const RunOptions& opts) {
  set_num_threads(tc.threads > 0 ? static_cast<int>(tc.threads)
                                 : std::max(1, hardware_threads() / std::max(1, opts.local_ranks)));
}

}  // namespace

RunResult run_training(const Config& cfg, const RunOptions& opts, const Group* world) {
  const TrainConfig& tc = cfg.train;
  const MatmulPrecisionGuard precision(cfg.parsed().precision);  // every product (docs/MODEL.md "Precision")
  const RunDeviceGuard device(cfg.parsed().device);  // the kernel table and allocator (ops/kernels.h)
  const FixedGemmBlocksGuard blocks(cfg.parsed().reduction == Reduction::canonical);  // ops/gemm.h
  set_run_threads(tc, opts);
  const RunMesh mesh = make_run_mesh(cfg, world);
  const bool checkpoints = !tc.checkpoint_dir.empty();
  if (checkpoints) install_stop_handlers();  // a signal from here on stops the run after its next step
  const bool lead = mesh.rank == 0;          // logs, metrics and checkpoints come from rank 0
  const TokenFile train_file = TokenFile::open((fs::path(cfg.data.dir) / "train.bin").string());
  const std::string val_path = (fs::path(cfg.data.dir) / "val.bin").string();
  const bool do_eval = tc.eval_every > 0 && fs::exists(val_path);
  const TokenFile val_file = do_eval ? TokenFile::open(val_path) : TokenFile();
  TrainModel model = make_train_model(cfg, opts, mesh);
  const LrSchedule lr_schedule{tc.lr, tc.min_lr, tc.warmup_steps, tc.steps};
  const double flops_per_token = train_flops_per_token(cfg.model, tc.seq_len);

  RunResult result;
  MfuCeiling ceiling(matmul_ceiling_name());  // fp32: the SGEMM rate; bf16: the bf16 kernel's
  ceiling.measured(result.sgemm_gflops = job_sgemm_gflops(mesh));
  report_start(mesh, cfg, model, result.sgemm_gflops, opts);
  MetricsWriter metrics(lead ? opts.metrics_path : std::string());
  if (lead) metrics.write(metrics_header(cfg, mesh.world_size));
  const int64_t first_step = resume_run(cfg, opts, mesh, model, metrics);
  const Fault fault = read_fault();
  auto evaluate = [&](int64_t step) {
    const double v = validation_loss(model, mesh, tc, val_file);
    result.val_losses.emplace_back(step, v);
    report_validation(metrics, mesh, step, v, opts);
  };
  CheckpointSaver saver(cfg, mesh);
  TraceSession trace(opts, tc.steps);
  model.before_update = [&saver] { saver.wait_for_copy(); };  // an async save copying the state
  const Progress progress(first_step, tc.steps);
  for (int64_t step = first_step; step < tc.steps && result.stop_signal == 0; ++step) {
    if (mesh.world()) mesh.world()->context().step = step;  // the comm ledger's step
    inject_fault(fault, mesh.rank, step);
    trace.begin_step(step);
    StepVotes votes{saver.writer_done(), got_sigterm() ? 1 : 0, got_sigusr1() ? 1 : 0};
    StepStats s;
    try {
      s = train_step(model, mesh, cfg, train_file, step, lr_schedule.at(step),
                     checkpoints ? &votes : nullptr);
    } catch (...) {  // the non-finite stop comes to every rank at the same step: commit the save in flight
      if (model.bad_steps >= tc.max_bad_steps) saver.finish(metrics);
      throw;
    }
    report_crossings(cfg.parsed().device, lead && step + 1 == tc.steps, step);  // and restarts the counts
    headline_figures(s, ceiling, flops_per_token, progress, first_step);
    result.steps.push_back(s);
    report_step(metrics, mesh, model, s, tc, opts);
    write_rank_lines(metrics, mesh, model, s, !opts.metrics_path.empty());  // collective; after --explain
    remeasure_ceiling(mesh, tc, step, ceiling);
    if (do_eval && (step + 1) % tc.eval_every == 0) evaluate(step);
    if (checkpoints) {
      const TraceScope span("checkpoint", "checkpoint save");
      result.stop_signal = checkpoint_boundary(saver, votes, step, tc, model, mesh, metrics);
    }
    trace.end_step(s);
  }
  saver.finish(metrics);
  keep_save_timings(saver, result);
  if (result.stop_signal != 0) {
    report_end(mesh, cfg, model, opts, result);
    return result;
  }
  if (do_eval && tc.steps % tc.eval_every != 0) evaluate(tc.steps - 1);
  trace.write(mesh, cfg.parallel.io_timeout_s, opts.quiet);
  if (model.fingerprint) model.fingerprint->write(opts.fingerprint_path, mesh);  // collective
  require_finite_result(model.chunk_ptrs(), result.val_losses, mesh.world(),
                        lead);  // collective; before any save
  if (!opts.save_dir.empty()) {
    save_model_dir(opts.save_dir, model.chunk_ptrs(), mesh.mesh(), lead);  // gathered from any layout
    wait_for_local_work(mesh.world(), cfg.parallel.io_timeout_s, "the model's save");
    if (!opts.quiet && lead) std::printf("saved %s\n", opts.save_dir.c_str());
  }
  report_end(mesh, cfg, model, opts, result);
  return result;
}

}  // namespace mt

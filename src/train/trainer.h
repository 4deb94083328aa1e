// The training loop of one process: set-up, a loop over train_step
// (train_step.h: sample the step's global batch, run its microbatches forward
// and backward through the executor, normalise by the global valid-token
// count, clip, AdamW), evaluation, and the reports (report.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/group.h"
#include "config/config.h"
#include "core/dir_lock.h"
#include "core/memory.h"

namespace mt {

struct RunOptions {
  std::string metrics_path;  // one JSON object per line, per step (empty: none)
  std::string save_dir;      // Hugging Face model directory written at the end (empty: none)
  std::string init_from;     // model directory to start from instead of the seed's initialisation
  std::string resume;        // "auto", a checkpoint directory, or empty (ckpt/checkpoint.h)
  std::string resume_dir;    // set by validate_run: the checkpoint `resume` resolved to ("": start fresh)
  std::shared_ptr<DirLock>
      checkpoint_lock;  // set by validate_run on rank 0: train.checkpoint_dir's, held for the run
  bool mesh_printed =
      false;                // --print-mesh printed the whole map: the start-up report leaves its summary out
  bool quiet = false;       // no log lines on stdout
  bool profile = false;     // per-kernel time shares (slightly slower)
  int local_ranks = 1;      // ranks on this machine: threads default to cores / local_ranks
  std::string trace_path;   // Chrome-trace JSON of the chosen steps' spans, every rank merged (train/trace.h)
  std::string trace_steps;  // --trace-steps: "3", "2-4", "2,5" (empty: the last step)
  bool explain = false;     // rank 0 prints every rank's collectives of the first step (explain.h)
  bool explain_memory = false;  // rank 0 prints the memory model beside every rank's measured peaks
  std::string
      fingerprint_path;  // --fingerprint: every site's checksums, written by rank 0 (train/fingerprint.h)
};

struct StepStats {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  int64_t tokens = 0;  // valid target tokens in the global batch
  double step_time_s = 0, tokens_per_s = 0;
  double cpu_s = 0;  // this process's CPU seconds over the step, all threads (core/timer.h)
  double mfu = 0, mfu_ceiling_gflops = 0;  // mfu = achieved / ceiling ≤ 1 (flops.h MfuCeiling)
  // What the ceiling was: a measurement (flops.h matmul_ceiling_name: "sgemm",
  // "bf16 onednn gemm", "bf16 emulated gemm") or "achieved".
  const char* mfu_ceiling = "sgemm";
  double eta_s = -1;            // expected time left in the run (< 0: unknown)
  bool first_estimate = false;  // the step after which the run's time is first estimated
  int64_t mem_peak_bytes = 0;
  bool skipped = false;  // NaN/Inf loss or gradient norm: no update
  // Where the step's time went on this rank (train/metrics_lines.h): its start
  // on the steady clock (core/trace_spans.h trace_now) and the optimizer's
  // window (clipping, the update, the state's all-gathers).
  double start_s = 0, optimizer_start_s = 0, optimizer_s = 0;
};

struct RunResult {
  std::vector<StepStats> steps;
  std::vector<std::pair<int64_t, double>> val_losses;  // (step, loss)
  // The matmul rate measured at start-up, at the run's precision (the MFU ceiling's first bound).
  double sgemm_gflops = 0;
  std::vector<std::pair<std::string, double>> kernel_seconds;  // with RunOptions::profile
  MemStats memory;                                             // this rank's allocator counters at the end
  double overlap_hidden =
      0;  // ZeRO 0/1: share of gradient-reduction time hidden behind the backward (last step)
  // Checkpoints (ckpt/checkpoint_async.h): per save, this rank's time training
  // was blocked by it and its write's time.
  std::vector<double> save_blocked_s, save_write_s;
  int stop_signal = 0;  // SIGTERM or SIGUSR1 when a preemption stopped the run early (train/preempt.h)
};

// Opens the data files the run will read and checks them against the model
// (DataError/ConfigError naming the file and the rule).
void check_training_data(const Config& cfg);

// The start-up checks of a run, each failure a ConfigError (or DataError)
// with the numbers: the config's rules (Config::validate), the mesh against a
// world of `world_size` ranks, the training data against the model, the
// estimated memory of the opts.local_ranks ranks on this machine against what
// it has free, MESHTRAIN_FAULT's grammar, --save writable (on rank 0, the one
// writer), --trace-steps' grammar and range, --init-from's config.json against the
// model (train.init_allow), train.checkpoint_dir writable, and the checkpoint
// --resume names against the run (ckpt/checkpoint.h check_resume). Resolves
// --resume once (ckpt/checkpoint.h resolve_resume) into opts.resume_dir, rank
// 0 printing the warnings of a --resume auto that passed over a damaged
// checkpoint (run_training's open_resume then checks the slices each rank
// reads, and may fall back further). Returns the notices of fields init_allow let through. Runs no
// collective: every rank calls it before any, so that a bad input ends every
// rank with one message.
std::vector<std::string> validate_run(Config& cfg, RunOptions& opts, int world_size, int rank);

// Runs cfg, which has passed validate_run with these opts, to completion: set-up, one
// train_step per step (train_step.h), the reports (report.h). Throws mt::Error
// after train.max_bad_steps consecutive non-finite steps. With
// train.checkpoint_dir, SIGTERM or SIGUSR1 stop every rank after the same
// step, which is saved; the run then returns with RunResult::stop_signal set
// (no evaluation, --save or trace at the end). `world` is the job's
// world group (null: a single process without MPI); every rank calls this.
RunResult run_training(const Config& cfg, const RunOptions& opts, const Group* world = nullptr);

}  // namespace mt

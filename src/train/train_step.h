// One training step and one evaluation, on the chunks of train_model.h over
// the groups of run_mesh.h: sample the step's global batch, take this rank's
// share (shard_batch), run the schedule's forwards and backwards (the
// executor), normalise by the global valid-token count, clip, AdamW.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"
#include "data/token_file.h"
#include "train/run_mesh.h"
#include "train/train_model.h"
#include "train/trainer.h"

namespace mt {

// Sequences of T tokens and their next-token targets, [rows, T] each.
struct Batch {
  int64_t rows = 0, T = 0;
  std::vector<int32_t> inputs, targets;
};

// Which ranks split a batch's rows between them.
enum class RowSplit {
  dp,    // training: dp replica r takes rows [r·B/dp, (r+1)·B/dp) of the global batch
  none,  // evaluation: every replica evaluates every row
};

// This rank's share of a global batch [B, T]: its rows under `split`, and
// under context parallelism its zigzag share of every sequence's tokens
// (T/cp of them, parallel/context_parallel.h); with the canonical mode's cp
// grain canonical_cp > 1 its pieces in piece order instead, at any cp, one
// process included (parallel/cp_canonical.h). The one place the data is
// sharded, for training and evaluation alike.
Batch shard_batch(const RunMesh& mesh, const Batch& global, RowSplit split, int64_t canonical_cp = 0);

// Counts that ride the step's own reductions when checkpoints are on
// (docs/PARALLELISM.md, "Preemption and asynchronous checkpoints"): each rank
// puts in its 0 or 1 and gets back the sum over the world, the same on every
// rank, so that all act on them after the same step. They travel as extra
// elements of the valid-token sum over dp × cp and of the gradient-norm sums
// over tp and then pp: summed along these orthogonal groups in turn, a value
// becomes a sum over the world. The step's own values are untouched.
struct StepVotes {
  int64_t writer_done = 0;  // the background write of the checkpoint in flight has finished here
  int64_t sigterm = 0;      // this rank has received SIGTERM (train/preempt.h)
  int64_t sigusr1 = 0;      // ... SIGUSR1
};

// Step `step` at learning rate lr: the statistics of the whole job's step
// (collective over the world). Skips the update when the loss or the gradient
// norm is not finite, and throws after train.max_bad_steps such steps in a row.
// With `votes` (non-null), they are summed over the world in the step's reductions.
StepStats train_step(TrainModel& model, const RunMesh& mesh, const Config& cfg, const TokenFile& train_file,
                     int64_t step, double lr, StepVotes* votes = nullptr);

// The mean next-token loss over the validation windows (evaluate.h), through
// every stage and summed over the cp shares; every rank returns it.
double validation_loss(TrainModel& model, const RunMesh& mesh, const TrainConfig& tc,
                       const TokenFile& val_file);

}  // namespace mt

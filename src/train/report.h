// What a training run reports: the start-up lines (mesh, model, SGEMM
// ceiling), one metrics line and one log line per step, --explain after the
// first step, validation losses, and at the end the memory
// table, the communication summary and the gradient-overlap share. Every
// function is called on every rank (several are collective); rank 0 prints.
#pragma once

#include <cstdint>

#include "config/config.h"
#include "train/run_mesh.h"
#include "train/run_support.h"
#include "train/train_model.h"
#include "train/trainer.h"

namespace mt {

// The mesh, data, context, tensor and pipeline lines, then the model line.
void report_start(const RunMesh& mesh, const Config& cfg, const TrainModel& model, double sgemm_gflops,
                  const RunOptions& opts);

// The step's metrics line (loss, communication bytes, memory by kind, the
// pipeline's idle shares, …) and log line; with --explain after step 0, every
// rank's collectives of that step.
void report_step(MetricsWriter& metrics, const RunMesh& mesh, TrainModel& model, const StepStats& s,
                 const TrainConfig& tc, const RunOptions& opts);

void report_validation(MetricsWriter& metrics, const RunMesh& mesh, int64_t step, double loss,
                       const RunOptions& opts);

// The end of the run: fills result.memory, result.overlap_hidden and
// result.kernel_seconds, and prints the memory table, the communication
// summary and the share of gradient reduction hidden behind the backward.
void report_end(const RunMesh& mesh, const Config& cfg, TrainModel& model, const RunOptions& opts,
                RunResult& result);

}  // namespace mt

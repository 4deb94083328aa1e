// The metrics file's lines beside the step lines (docs/FORMATS.md, "Metrics"):
// a header line first, {"header": {...}} with the config and the analytic
// memory model, and each step one line per rank, {"step", "rank", ...} with
// where that rank's time went and its memory by kind. Readers that select
// lines by "loss", "val_loss", "step_time_s" or "checkpoint_step" pass over both.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "config/config.h"
#include "train/run_mesh.h"
#include "train/run_support.h"
#include "train/train_model.h"
#include "train/trainer.h"

namespace mt {

// {"header": {"format", "world_size", "config": {section: {key: value}},
//  "memory_model": {"per_rank": {kind: bytes}, "total": bytes}}}; the model is
// cost/memory_estimate.h estimate_training_memory(cfg).
nlohmann::json metrics_header(const Config& cfg, int world_size);
bool is_header_line(const std::string& line);

// This rank's line of step s.step: time_s {step, compute, comm_exposed {axis: s},
// pipeline_idle, optimizer}, comm_bytes_by_axis, mem_peak_by_kind.
nlohmann::json rank_line(const RunMesh& mesh, const TrainModel& model, const StepStats& s);

// Every rank's line, gathered and written by rank 0 in rank order (collective
// over the world when `on`; nothing when not).
void write_rank_lines(MetricsWriter& metrics, const RunMesh& mesh, const TrainModel& model,
                      const StepStats& s, bool on);

}  // namespace mt

// The subcommands of the meshtrain binary.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace mt {

struct TrainArgs {
  std::string config;
  std::vector<std::string> overrides;
  std::optional<int64_t> dp, tp, pp, cp, zero;
  bool print_mesh = false;
  RunOptions run;
};
int run_train_command(const TrainArgs& args);

struct PrepareArgs {
  std::vector<std::string> text;
  std::string out;
  int64_t vocab_size = 8192;
};
int run_prepare_command(const PrepareArgs& args);

struct EvalArgs {
  std::string model, data;
  int64_t seq_len = 0, max_windows = 0, threads = 0;
};
int run_eval_command(const EvalArgs& args);

struct SampleArgs {
  std::string model, tokenizer;
  std::string prompt = "The ";
  int64_t tokens = 48;
};
int run_sample_command(const SampleArgs& args);

struct ScheduleArgs {
  std::string kind;  // gpipe | 1f1b | interleaved
  int64_t pp = 0, microbatches = 0, v = 1;
};
// Prints the pipeline schedule's time x rank grid (pipeline/render.h).
int run_schedule_command(const ScheduleArgs& args);

struct ExportArgs {
  std::string checkpoint, out;
};
// Writes the checkpoint's model as a Hugging Face directory (train/checkpoint.h export_checkpoint).
int run_export_command(const ExportArgs& args);

}  // namespace mt

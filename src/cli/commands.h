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
  std::string placement = "nodes";  // mesh/placement.h
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
  int64_t dp = 1, tp = 1, pp = 1, cp = 1;  // the layout under mpirun (eval_command.cpp)
  int64_t position_buckets = 0;            // > 0: also the mean loss per position bucket (one process)
  std::string precision = "fp32";          // matmul precision, as train.precision (ops/gemm.h)
};
int run_eval_command(const EvalArgs& args);

struct GenerateArgs {
  std::string model, tokenizer, prompts_file;
  std::vector<std::string> prompts;
  int64_t max_new_tokens = 64, top_k = 0, seed = 0, prefill_chunk = 0, batch_size = 8, threads = 0;
  double temperature = 0.0, top_p = 1.0;
  std::string output = "text", kv_cache = "f32";
  bool logprobs = false;
  int64_t dp = 1, tp = 1, pp = 1, cp = 1;  // the layout under mpirun (generate_command.cpp)
  std::string cp_impl = "ring";            // parallel.cp_impl: the prefill's attention under cp
  std::string precision = "fp32";          // matmul precision, as train.precision (ops/gemm.h)
  std::string device = "cpu";              // as train.device: cpu, or fake (for tests)
};
// generate_command.cpp
int run_generate_command(const GenerateArgs& args);

struct ScheduleArgs {
  std::string kind;  // gpipe | 1f1b | interleaved
  int64_t pp = 0, microbatches = 0, v = 1;
};
// Prints the pipeline schedule's time x rank grid (pipeline/render.h).
int run_schedule_command(const ScheduleArgs& args);

struct ExportArgs {
  std::string checkpoint, out;
};
// Writes the checkpoint's model as a Hugging Face directory (train/model_io.h export_checkpoint).
int run_export_command(const ExportArgs& args);

struct PlanArgs {
  std::string config, machine, layout, json_out, attention = "flash", grad_overlap = "backward";
  int64_t devices = 0, global_batch = 0, seq_len = 0, top = 3;
  std::vector<int64_t> scaling;
};
// plan_command.cpp: ranks the layouts of a model on a machine (docs/PLANNER.md).
int run_plan_command(const PlanArgs& args);

struct CalibrateArgs {
  std::string out, config;
  double seconds = 0.2;
};
// calibrate_command.cpp: measures this machine and writes its description.
int run_calibrate_command(const CalibrateArgs& args);

struct ReportArgs {
  std::vector<std::string> runs;   // metrics files (train --metrics)
  std::vector<std::string> plans;  // plan --scaling … --json outputs
  std::string out = "report.html";
  std::string vega = "/usr/share/javascript/vega";  // Debian's libjs-vega modules, or a one-file bundle
};
// Writes one self-contained HTML page of charts of the runs (cli/report.h).
int run_report_command(const ReportArgs& args);

}  // namespace mt

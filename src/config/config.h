// The run configuration: a TOML file with sections [model], [train], [data] and
// [parallel], every key overridable with `--set section.key=value`. Each key is
// declared once in the key table (config.cpp) with its default and meaning; the
// table drives parsing, `meshtrain train --help` and docs/CONFIG.md.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/recompute.h"
#include "ops/gemm.h"
#include "ops/kernels.h"
#include "optim/optimizer.h"
#include "parallel/canonical.h"
#include "parallel/context_parallel.h"
#include "parallel/dp_allreduce.h"
#include "parallel/tp2d.h"
#include "pipeline/schedule.h"

namespace mt {

struct TrainConfig {
  int64_t steps = 200;
  int64_t batch_size = 8;       // global sequences per step
  int64_t microbatch_size = 8;  // sequences per rank per forward/backward
  int64_t seq_len = 256;
  double lr = 3e-3;
  double min_lr = 3e-4;
  int64_t warmup_steps = 10;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double adam_eps = 1e-8;
  std::string optimizer = "adamw";  // adamw | sgd | lamb (optim/optimizer.h)
  double momentum = 0.0;            // sgd
  bool nesterov = false;            // sgd
  std::string precision = "fp32";   // fp32 | bf16: the matmul precision (ops/gemm.h)
  std::string device = "cpu";       // cpu | fake (tests) | cuda: the kernel table (ops/kernels.h)
  double grad_clip = 1.0;
  uint64_t seed = 1234;
  int64_t eval_every = 50;
  int64_t eval_windows = 16;
  std::string recompute = "none";               // none | full | selective (true = full, false = none)
  std::string recompute_modules = "attention";  // selective: attention, mlp, norms (model/recompute.h)
  int64_t max_bad_steps = 5;
  int64_t log_every = 1;
  int64_t threads = 0;            // 0: all cores (divided among the ranks on this machine)
  std::string init_allow;         // --init-from: model fields that may differ from the saved config.json
  std::string checkpoint_dir;     // training checkpoints (ckpt/checkpoint.h); empty: none
  int64_t checkpoint_every = 0;   // steps between checkpoints (0: only the last step's)
  int64_t keep_checkpoints = 0;   // newest checkpoints kept (0: all)
  bool async_checkpoint = false;  // write checkpoints on a background thread while training goes on
  std::string resume_allow;       // --resume: model/optimizer/data keys that may differ from the checkpoint
};

struct DataConfig {
  std::string dir = "data/fortunes";
  int64_t ignore_id = -1;  // targets equal to this token id add nothing to the loss (-1: none)
};

struct ParallelConfig {
  int64_t dp = 1, tp = 1, pp = 1, cp = 1;
  int64_t zero = 0;
  // HSDP (docs/PARALLELISM.md "HSDP"): ZeRO shards its state within shard
  // groups of dp_shard consecutive dp ranks, replicated over dp / dp_shard
  // replicas; 0: dp (flat ZeRO, one shard group).
  int64_t dp_shard = 0;
  // The ZeRO 0/1 gradient all-reduce: "flat" (one all-reduce over the dp
  // group) or "hierarchical" (reduce-scatter inside each node, all-reduce
  // across the nodes, all-gather inside; parallel/data_parallel.h).
  std::string dp_allreduce = "flat";
  // Expert parallelism: the experts split over runs of ep consecutive ranks of
  // the flattened (dp, cp) index (docs/PARALLELISM.md "Expert parallelism").
  int64_t ep = 1;
  bool sp = false;
  // Chunked TP GEMMs whose collectives overlap the next chunk's GEMM
  // (docs/PARALLELISM.md "Overlapping TP communication"); needs tp > 1.
  bool tp_overlap = false;
  // 2-D tensor parallelism: "R,C" arranges the tp ranks as an R x C grid
  // (parallel/tp2d.h); "" is 1-D tp.
  std::string tp2d;
  std::string schedule = "1f1b";
  int64_t virtual_stages = 1;
  std::string stage_layers;  // "" or "3,2,2,1": layers per virtual stage
  std::string cp_impl = "ring";
  // cp_impl = hybrid: the all-to-all's ranks, 1 < cp_ulysses < cp dividing cp
  // (parallel/cp_ulysses.h); 0: not set.
  int64_t cp_ulysses = 0;
  // "default" or "canonical": every layout bitwise the one-process run
  // (parallel/canonical.h; docs/PARALLELISM.md "The canonical mode").
  std::string reduction = "default";
  // The canonical mode's tp grain: every tp-split sum over this many fixed
  // pieces (parallel/canonical_tp.h); tp must divide it. 1: no pieces (tp 1 only).
  int64_t canonical_tp = 1;
  // The canonical mode's cp grain: every sequence cut into 2 x this many zigzag
  // chunks, piece p = chunks {p, 2C-1-p} (parallel/cp_canonical.h); cp must
  // divide it. 1: no pieces (cp 1 only).
  int64_t canonical_cp = 1;
  // Its d grain: the model width's sums over this many fixed pieces
  // (parallel/canonical_tp_grid.h), needed by 2-D tp. 1: no d pieces.
  int64_t canonical_tp_d = 1;
  double bucket_mb = 25.0;       // ZeRO 0/1 gradient bucket size
  double timeout_s = 300.0;      // watchdog: a collective not done after this long ends the job
  double io_timeout_s = 3600.0;  // the same for waits on another rank's long local work (save, trace)
};

// The string-valued keys as typed values: parsed once, by Config::validate at
// start-up, and read by the run from there (no use site parses a string
// again). The strings stay in the sections above, so that files, metrics
// headers, checkpoints and --help keep their spelling.
struct ParsedKeys {
  OptimizerKind optimizer = OptimizerKind::adamw;             // train.optimizer
  MatmulPrecision precision = MatmulPrecision::fp32;          // train.precision
  RunDevice device = RunDevice::cpu;                          // train.device
  pp::ScheduleKind schedule = pp::ScheduleKind::one_f_one_b;  // parallel.schedule
  cp::CpImpl cp_impl = cp::CpImpl::ring;                      // parallel.cp_impl
  DpAllReduce dp_allreduce = DpAllReduce::flat;               // parallel.dp_allreduce
  Reduction reduction = Reduction::standard;                  // parallel.reduction
  tp2d::Grid tp_grid;                                         // parallel.tp2d ("": {1, tp})
  Recompute recompute;                                        // train.recompute, train.recompute_modules
  // parallel.stage_layers: layers per virtual stage (pp::stage_layer_counts),
  // pp x virtual_stages entries; empty without pipeline stages.
  std::vector<int64_t> stage_layers;
};

struct Config {
  ModelConfig model;
  TrainConfig train;
  DataConfig data;
  ParallelConfig parallel;
  // The keys the user gave ("parallel.bucket_mb"), in the file or by --set
  // (config_set records each); the others hold their defaults.
  std::set<std::string> set_keys;

  bool was_set(const std::string& key) const { return set_keys.count(key) != 0; }

  // Every rule that involves more than one key, checked once at start-up. Each
  // rule is the function the code relying on it calls (tp_dims, check_zigzag,
  // check_sequence_parallel, validate_schedule, ...), not a restatement of it.
  // Parses the string-valued keys into parsed() on the way; run it again
  // after changing a key.
  void validate();
  // The typed keys of the last validate(); an internal error before any.
  const ParsedKeys& parsed() const;

 private:
  ParsedKeys parsed_;
  bool validated_ = false;
};

// The keys the user set that have no effect in the chosen layout, one line
// each: "parallel.bucket_mb has no effect with parallel.zero = 3". Keys left at
// their defaults are never named. `meshtrain train` prints each as a note.
std::vector<std::string> ineffective_keys(const Config& c);

// One configuration key.
struct ConfigKey {
  std::string name;  // "section.key"
  std::string type;  // int | float | bool | string
  std::string help;
};
const std::vector<ConfigKey>& config_keys();

// Current value of a key as text ("256", "0.0003", "true", "data/fortunes").
std::string config_get(const Config& c, const std::string& key);
// Sets a key from text; ConfigError names the key, the value and the expected type.
void config_set(Config& c, const std::string& key, const std::string& value);

// Reads a TOML file (ConfigError on syntax errors with line and column, unknown
// sections or keys, wrong types), then applies "key=value" overrides in order.
// Does not validate: call Config::validate() once everything is set.
Config load_config(const std::string& path, const std::vector<std::string>& overrides);
Config parse_config_text(const std::string& toml_text, const std::string& source_name,
                         const std::vector<std::string>& overrides);

// The key table as text: one line per key with its default and meaning.
std::string config_help();

}  // namespace mt

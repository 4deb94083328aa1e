#include "cli/layout_command.h"

#include <algorithm>
#include <optional>
#include <string>

#include "comm/runtime.h"
#include "core/error.h"
#include "core/threads.h"
#include "mesh/mesh.h"

namespace mt {

Config layout_config(const ModelConfig& model, const LayoutFlags& f, int64_t seq_len, int64_t microbatch,
                     int world_size) {
  Config cfg;
  cfg.model = model;
  cfg.parallel.dp = f.dp;
  cfg.parallel.tp = f.tp;
  cfg.parallel.pp = f.pp;
  cfg.parallel.cp = f.cp;
  cfg.parallel.cp_impl = f.cp_impl;
  cfg.train.seq_len = seq_len;
  cfg.train.microbatch_size = microbatch;
  cfg.train.batch_size = microbatch * f.dp * f.pp;
  cfg.validate();
  validate_mesh(mesh_sizes(cfg.parallel), world_size);
  return cfg;
}

TrainModel load_on_layout(const Config& cfg, const std::string& dir, int64_t threads, int local_ranks,
                          const RunMesh& mesh) {
  set_num_threads(threads > 0 ? static_cast<int>(threads)
                              : std::max(1, hardware_threads() / std::max(1, local_ranks)));
  RunOptions opts;
  opts.init_from = dir;
  opts.quiet = true;
  opts.local_ranks = local_ranks;
  return make_train_model(cfg, opts, mesh);
}

int run_on_every_rank(Group& world, const std::function<void()>& setup, const std::function<void()>& body) {
  std::optional<std::string> error;
  try {
    setup();
  } catch (...) {
    int status = 1;
    error = describe_current_exception(&status);
  }
  agree_on_startup_errors(world, error);  // one message, every rank exits 1
  try {
    body();
  } catch (...) {  // ends every rank, non-zero, with its message
    int status = 1;
    const std::string message = describe_current_exception(&status);
    abort_job(world, message, status);
  }
  return 0;
}

}  // namespace mt

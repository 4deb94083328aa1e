// What `eval` and `generate` share when they run under mpirun on a layout:
// the run configuration of a saved model on the layout flags, and the two
// error rules of a collective command (start-up errors agreed, one message;
// later ones end every rank).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "comm/group.h"
#include "config/config.h"
#include "train/run_mesh.h"
#include "train/train_model.h"

namespace mt {

struct LayoutFlags {
  int64_t dp = 1, tp = 1, pp = 1, cp = 1;
  std::string cp_impl = "ring";  // parallel.cp_impl
};

// `model` on the layout, with the training keys a valid run of `microbatch`
// sequences of seq_len tokens needs (the batch: pp microbatches per replica,
// which satisfies every schedule); validated, and the mesh against the world.
Config layout_config(const ModelConfig& model, const LayoutFlags& f, int64_t seq_len, int64_t microbatch,
                     int world_size);

// This rank's threads (`threads` > 0, or this machine's cores over the
// local_ranks on it), then the model of directory `dir` loaded into cfg's
// layout as --init-from does.
TrainModel load_on_layout(const Config& cfg, const std::string& dir, int64_t threads, int local_ranks,
                          const RunMesh& mesh);

// setup() on every rank, a failure on any rank reported once and every rank
// exiting 1 (comm/runtime.h agree_on_startup_errors); then body(), where any
// exception ends every rank, non-zero, with its message. Returns 0.
int run_on_every_rank(Group& world, const std::function<void()>& setup, const std::function<void()>& body);

}  // namespace mt

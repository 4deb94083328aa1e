// What one rank trains: its model chunks (one, or one per virtual pipeline
// stage it holds), each with the parameter store of the run's layout and an
// optimizer, and the executor that runs every step's schedule on them.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "model/llama.h"
#include "model/stage_split.h"
#include "optim/optimizer.h"
#include "pipeline/executor.h"
#include "train/fingerprint.h"
#include "train/run_mesh.h"
#include "train/trainer.h"

namespace mt {

// One line per virtual stage: "stage 1 (pp rank 1, chunk 0): layers 4-7 + norm, head, loss".
std::string stage_map(const std::vector<StageRange>& stages, int pp);

struct TrainModel {
  // Every virtual stage's layers; one whole-model stage without pipeline parallelism.
  std::vector<StageRange> stages;
  // This rank's chunks: virtual stages c·pp + pp_rank, c = 0 … v − 1.
  std::vector<std::unique_ptr<Llama>> chunks;
  std::vector<std::unique_ptr<Optimizer>> optims;  // one per chunk (train.optimizer)
  // The chunk holding the embedding or the last stage's tied copy of it (else null).
  ParamStore* tied_store = nullptr;
  // A pipeline's schedule, or the one-stage schedule without pp (executor.h).
  std::unique_ptr<pp::Executor> executor;
  int64_t bad_steps = 0;  // consecutive non-finite steps so far
  // Called before the optimizer next changes the parameters and moments: an
  // asynchronous checkpoint still copying them waits there (ckpt/checkpoint_async.h).
  std::function<void()> before_update;
  // --fingerprint: what the chunks' probe records (null: off; train/fingerprint.h).
  std::unique_ptr<Fingerprint> fingerprint;

  bool pipelined() const { return stages.size() > 1; }
  Llama& first() { return *chunks.front(); }
  std::vector<Llama*> chunk_ptrs() const;
};

// The chunks of this rank under cfg's layout, initialised from the seed or
// loaded from opts.init_from.
TrainModel make_train_model(const Config& cfg, const RunOptions& opts, const RunMesh& mesh);

}  // namespace mt

// The pieces of the memory model (cost/memory_model.h) that follow one model
// chunk's buffers (their plan, model/buffer_plan.h) and the pipeline's
// activation slots (pipeline/executor.cpp), in floats. Private to the model.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.h"
#include "model/params.h"
#include "pipeline/schedule.h"

namespace mt::memory_model {

// What one chunk of stage `stage` allocates, in floats (the sums of its
// buffer plan's entries, model/buffer_plan.h): as activations, the backward's
// shared buffers plus `slots` microbatch slots; as scratch, tp's kv-head and
// SP's norm and MoE partial gradients; and one residual-stream tensor (what
// a pipeline transfer carries).
struct ChunkFloats {
  int64_t activation = 0, scratch = 0, residual = 0;
};
ChunkFloats chunk_floats(const Config& cfg, const TpDims& td, const StageRange& stage, int64_t slots);

// Microbatches a step runs on each rank: batch_size / (dp · microbatch_size),
// at least 1 (so that an estimate of a configuration not yet validated, e.g.
// by the planner, still answers).
int microbatches_of(const Config& cfg);

// The step's schedule as the executor runs it (one_stage_schedule without
// pipelining). Built once per layout: it lists every pp rank's actions, so a
// model of many ranks (the planner's) must not rebuild it per rank.
pp::Schedule schedule_of(const Config& cfg);

// Activation slots each of this pp rank's chunks holds at most: `s` (the
// layout's schedule_of) replayed the way the executor hands slots out (taken
// at a forward or an activation receive, returned after the backward).
std::vector<int64_t> slots_per_chunk(const Config& cfg, const pp::Schedule& s, int64_t pp_rank);

// Floats of the context-parallel attention's buffers at their peak, one call
// at a time, per kind: comm (ring: the k/v blocks in flight and the travelling
// dk/dv; all-gather: every rank's k/v and their gradients) and scratch (the
// ring's partial output). The peaks of the buffer plan the attention allocates
// from (parallel/cp_buffer_plan.h, through cp_attention.h
// CpAttention::peak_floats), for the attention dims of this rank's layer.
struct CpFloats {
  int64_t comm = 0, scratch = 0;
};
CpFloats cp_floats(const Config& cfg, const TpDims& td);

// The optimizer's state tensors per parameter, the Optimizer's own count
// (optim/optimizer.h optimizer_state_count) for the configured optimizer.
int64_t optimizer_states(const Config& cfg);

// Floats of one chunk's part of a checkpoint's staging copy on rank `rank`
// (ckpt/checkpoint_save.cpp plan_slices), 0 without train.checkpoint_dir:
// every slice this rank writes (spec_slice under the store's ZeRO sharding),
// its real elements once for the parameters and once per optimizer state.
int64_t checkpoint_staging_floats(const Config& cfg, int64_t rank, const ParamTable& chunk);

}  // namespace mt::memory_model

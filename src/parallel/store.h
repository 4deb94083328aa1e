// Where a model's parameters and gradients live. The model computes one unit
// at a time (the embedding, each decoder block, the final norm and LM head)
// and asks its ParamStore for that unit's full parameters and for a full-size
// buffer to accumulate the unit's gradients into. A store decides what that
// costs: nothing for one process (LocalStore), gradient buckets reduced over
// the data-parallel group as they fill (ZeRO 0/1), a reduce-scatter of each
// unit's gradients (ZeRO 2), or an all-gather of each unit's parameters before
// use (ZeRO 3 / FSDP).
//
// The trainer then sees only this rank's share of the state: local_params(),
// local_grads() and the decay ranges of that share, which is what the
// optimizer updates.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/exact_sum.h"
#include "mesh/mesh_shape.h"
#include "optim/adamw.h"

namespace mt {

// One parameter inside a unit: rows × row_size elements at `offset` of the
// full flat buffer. Shards split rows (dim 0). The model derives it from the
// parameter's spec (model/params.h param_slot); a store reads nothing else.
struct ParamSlot {
  std::string name;
  int64_t offset = 0;
  int64_t rows = 0;
  int64_t row_size = 1;
  bool decay = true;
  // Counted in grad_sum_squares() on this rank. False on all but one of the
  // tensor-parallel ranks that hold the same copy (replicated norms and kv heads),
  // so that the norm, summed over tp, counts every element of the model once.
  bool norm_counted = true;
  // One of this rank's experts under expert parallelism: reduced over the
  // expert's replicas, not over the whole group (data_parallel.h).
  bool expert = false;
  int64_t numel() const { return rows * row_size; }
};

// A contiguous range [begin, end) of the full flat parameter buffer.
struct UnitSpec {
  std::string name;  // "embed", "layer 3", "final"
  int64_t begin = 0;
  int64_t end = 0;
  std::vector<ParamSlot> params;
  int64_t numel() const { return end - begin; }
};

enum class Pass { forward, backward };

// How a store shards model state over its group (dp, or dp × cp): ZeRO stage
// 0 (nothing sharded) to 3 (parameters too), and the group's mesh axes.
struct StoreSharding {
  int zero = 0;
  AxisSet group = 0;  // 0: a store of one process
  // HSDP: ZeRO's pieces over shard groups of this many consecutive dp ranks
  // (× cp), replicated over the groups (mesh/layout.h Layout::dp_shard); 0: over all of `group`.
  int dp_shard = 0;
};

class ParamStore {
 public:
  virtual ~ParamStore() = default;

  // --- model side (per unit, per microbatch) ---
  // The unit's full parameters [unit.numel()], valid until release_params.
  virtual const float* acquire_params(int unit, Pass pass) = 0;
  virtual void release_params(int unit, Pass pass) = 0;
  // A full-size gradient buffer for the unit to ACCUMULATE into, valid until
  // release_grads, which says the unit's gradient for this microbatch is complete.
  virtual float* acquire_grads(int unit) = 0;
  virtual void release_grads(int unit) = 0;
  // Called by the model between kernels: lets non-blocking communication progress
  // (MPI moves data only inside MPI calls), so reductions overlap compute.
  virtual void poll() {}
  // How this store shards parameters, gradients and optimizer state.
  virtual StoreSharding sharding() const { return {}; }
  // The full parameters where they stay in one buffer that nothing writes
  // between a step's first forward and its optimizer update (every unit's
  // acquire_params points into it); empty where they are gathered per use
  // (ZeRO 3). The bf16 kernel keeps its rounded weights for the step by it
  // (ops/gemm.h Bf16WeightBits).
  virtual std::span<const float> resident_params() const { return {}; }

  // --- step side: called by the executor only (pp::Executor::run, src/pipeline/executor.h) ---
  // Before the step's first forward: clears gradients. `microbatches` is the
  // number of backwards the model will run this step.
  virtual void begin_step(int64_t microbatches) = 0;
  // Right before the model's index-th backward of the step (0 … microbatches−1),
  // counted per store: the backward with index microbatches−1 is the last, and
  // its release_grads start the reductions. Counted by backward, not forward,
  // because a pipeline runs several forwards ahead of their backwards.
  // `microbatch` is the schedule's number of the microbatch this backward is
  // for (0 … microbatches−1 on this rank, in batch order), which a schedule may
  // run in another order (gpipe's backwards descend).
  virtual void begin_microbatch(int64_t index, int64_t microbatch) = 0;
  // After the last backward: every reduction has completed.
  virtual void finish_grads() = 0;
  // --- trainer side (per step, after finish_grads) ---
  // Σ g² over this rank's model (its tp shard) after the dp reduction, each
  // element counted once; parameters with norm_counted = false are left out.
  virtual double grad_sum_squares() = 0;
  // The canonical mode's form of it (parallel/canonical.h): the same elements,
  // each square added exactly to `acc`, and summed over the same ranks by
  // integer sums of acc's limbs — a total that does not depend on the sharding.
  virtual void grad_sum_squares_exact(ExactSum& acc) = 0;
  // This rank's share of parameters and gradients, what the optimizer updates.
  virtual float* local_params() = 0;
  virtual float* local_grads() = 0;
  virtual int64_t local_numel() const = 0;
  virtual std::vector<DecayRange> local_decay_ranges() const = 0;
  // This rank's share of one parameter's (reduced) gradient, after
  // finish_grads: a pointer into local_grads() and its element count. Two
  // stores over the same dp group holding a parameter of the same shape (a tied
  // embedding on the first and last pipeline stage) return matching shares.
  virtual float* local_grad_of(const std::string& name, int64_t* n) = 0;
  // The same for the parameter: its piece in local_params(), laid out as the
  // parameter's state_layout (model/params.h) — whole for ZeRO 0, this rank's
  // rows of each tp piece for ZeRO 1-3. What a save reads (for ZeRO 1/2 a copy
  // of the current full parameters' shard: writing into it changes nothing
  // until the optimizer's after_update).
  virtual float* local_param_of(const std::string& name, int64_t* n) = 0;
  // After the optimizer step: make the updated parameters visible where the
  // model reads them (all-gather for ZeRO 1/2).
  virtual void after_update() = 0;
  // The tied embedding's exchange between the first and the last pipeline
  // stage (train_step.cpp): where the parameter's reduced gradient lies as the
  // gradient norm reads it — the whole parameter where every rank keeps the
  // whole reduced gradient (ZeRO 1), its local_grad_of share otherwise — and,
  // after the exchange summed it in place, the share the optimizer reads made
  // to follow.
  virtual float* exchanged_grad_of(const std::string& name, int64_t* n) { return local_grad_of(name, n); }
  virtual void after_grad_exchange(const std::string& /*name*/) {}
  // After finish_grads: adds `full` (the unit's elements, already reduced over
  // the store's group) into this rank's share of the unit's reduced gradient,
  // each element once (the canonical mode's tied head, canonical_store.h).
  virtual void add_reduced_grads(int unit, const float* full);

  // --- the canonical mode's tied embedding on one stage (canonical_store.h) ---
  // Whether the LM head tied to a held embedding accumulates into a tree of its
  // own (acquire_tied_grads) rather than into the embedding unit's gradient.
  virtual bool keeps_tied_apart() const { return false; }
  // A zeroed full-size buffer for the head's gradient of the unit, per
  // microbatch, and its release; only where keeps_tied_apart().
  virtual float* acquire_tied_grads(int unit);
  virtual void release_tied_grads(int unit);

  // --- whole-model access (checkpoints, initialisation); collective for sharded stores ---
  // Writes the full parameters into out[total] (on every rank). `out` and
  // `full` below are host memory: these are the "checkpoint" crossings.
  virtual void gather_full_params(float* out) = 0;
  // Sets this rank's share from the full parameters (every rank passes the same full buffer).
  virtual void scatter_full_params(const float* full) = 0;
  // Sets this rank's share from a generator: fill(param, first, n, out) writes
  // elements [first, first + n) of `param` (row-major) to out[n]. Only the
  // owned elements are generated, so a shard never needs the full tensor.
  using ParamFill = std::function<void(const ParamSlot& param, int64_t first, int64_t n, float* out)>;
  virtual void init_params(const ParamFill& fill) = 0;
};

// fill(param, first, n, out) for an `out` on the run's device: straight into
// `out` on the host device, else into a host buffer and across ("init").
void fill_on_device(const ParamStore::ParamFill& fill, const ParamSlot& param, int64_t first, int64_t n,
                    float* out);

// Units in order; total = end of the last one.
int64_t units_total(const std::vector<UnitSpec>& units);

// The parameter named `name` (Error if none).
const ParamSlot& find_slot(const std::vector<UnitSpec>& units, const std::string& name);

// Σ g² over the parameters with norm_counted, of a full flat buffer.
double counted_sum_squares(const std::vector<UnitSpec>& units, const float* full);
// The same, each square added exactly to `acc`.
void counted_sum_squares_exact(const std::vector<UnitSpec>& units, const float* full, ExactSum& acc);

}  // namespace mt

// How this run is laid out on the job: the device mesh, this rank's place in
// it, and the parameter store of the layout (LocalStore for one process, the
// data-parallel/ZeRO store otherwise). The training loop asks it for the few
// collectives it needs itself (the global valid-token count, the loss) and for
// the reports (memory per rank, communication per step).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "comm/group.h"
#include "config/config.h"
#include "core/memory.h"
#include "mesh/mesh.h"
#include "parallel/store.h"

namespace mt {

class RunLayout {
 public:
  int world_size = 1, rank = 0;
  int dp = 1, dp_rank = 0;
  int tp = 1, tp_rank = 0;
  bool sp = false;

  // The store of this layout (null: the model's own LocalStore).
  std::unique_ptr<ParamStore> make_store(const Config& cfg) const;

  // The tensor-parallel group (null when tp = 1), for the model.
  Group* tp_group() const { return tp_group_.get(); }
  // Σ over tp of this rank's squared gradient norm (each rank counts its shard
  // and one copy of what is replicated): the whole model's.
  void sum_over_tp(double* v);

  void set_step(int64_t step);
  void sum_over_dp(int64_t* v);
  void sum_over_dp(double* v);
  // This machine's SGEMM ceiling for the whole job: every rank measures at the
  // same moment (after a barrier) with its own threads, and the rates are summed.
  double job_sgemm_gflops();
  // Σ bytes per "op/axis" in this step (rank 0's view of its own calls).
  std::map<std::string, int64_t> comm_bytes(int64_t step) const;
  std::string describe() const;      // the mesh table and the ZeRO stage
  std::string comm_summary() const;  // the ledger, summarised
  // --explain: every rank's collectives of `step`, in rank order, on rank 0
  // ("" elsewhere); collective over the world.
  std::string explain(int64_t step);
  double overlap_hidden(ParamStore& store) const;
  // Peak bytes per category on every rank, as a table (collective over the world).
  std::string memory_report(const MemStats& mine);

  const DeviceMesh* mesh() const { return mesh_.get(); }

 private:
  friend RunLayout make_run_layout(const Config& cfg, const Group* world);
  int zero_ = 0;
  int64_t bucket_bytes_ = 0;
  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<Group> world_, dp_group_, tp_group_;
};

// Validates the mesh against the world (ConfigError with the numbers) and builds
// the groups. world may be null for a single process without MPI.
RunLayout make_run_layout(const Config& cfg, const Group* world);

}  // namespace mt

// How this run is laid out on the job: the device mesh, this rank's place in
// it, and the parameter store of the layout (LocalStore for one process, the
// data-parallel/ZeRO store otherwise). The training loop asks it for the few
// collectives it needs itself (the global valid-token count, the loss) and for
// the reports (memory per rank, communication per step).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"
#include "config/config.h"
#include "core/memory.h"
#include "mesh/mesh.h"
#include "model/params.h"
#include "parallel/store.h"
#include "train/pipeline.h"

namespace mt {

class RunLayout {
 public:
  int world_size = 1, rank = 0;
  int dp = 1, dp_rank = 0;
  int tp = 1, tp_rank = 0;
  bool sp = false;
  int pp = 1, pp_rank = 0, virtual_stages = 1;
  int cp = 1, cp_rank = 0;
  bool cp_ring = true;
  // Every virtual stage's layers (pipeline.h); one whole-model stage without pp.
  std::vector<StageRange> stages;
  // This rank's chunks: virtual stages c·pp + pp_rank, c = 0 … virtual_stages − 1.
  StageRange chunk_stage(int c) const { return stages[static_cast<size_t>(c * pp + pp_rank)]; }

  // The store of one chunk of this layout (null: the model's own LocalStore);
  // its group is dp, or dp × cp with context parallelism.
  std::unique_ptr<ParamStore> make_store(const Config& cfg, const StageRange& stage = {}) const;

  // The tensor-parallel group (null when tp = 1), for the model.
  Group* tp_group() const { return tp_group_.get(); }
  // The tp ranks sharing a kv head when tp > n_kv_heads (null otherwise), for the model.
  Group* tp_kv_group() const { return tp_kv_group_.get(); }
  // Σ over tp of this rank's squared gradient norm (each rank counts its shard
  // and one copy of what is replicated): the whole model's.
  void sum_over_tp(double* v);
  // Σ over the pipeline stages (the loss lives on the last, the gradient norm on all).
  void sum_over_pp(double* v);
  Group* pp_group() const { return pp_group_.get(); }
  // With tied embeddings over pp > 1: sums the embedding's gradient between the
  // first stage and the last stage's copy (both hold the same dp share after
  // finish_grads), so the two copies stay equal. `store` is the chunk that
  // holds either (null on the other ranks, which do nothing).
  void sum_tied_embedding(ParamStore* store);

  void set_step(int64_t step);
  // Σ over the data: the dp replicas and, with cp, the cp shares of the sequences.
  void sum_over_dp(int64_t* v);
  void sum_over_dp(double* v);
  Group* cp_group() const { return cp_group_.get(); }  // null when cp = 1
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
  // Every rank's pipeline spans as one Chrome-trace file (rank 0; "" elsewhere); collective.
  std::string trace_json(const std::vector<PipeSpan>& spans);
  double overlap_hidden(ParamStore& store) const;
  // Peak bytes per category on every rank, as a table (collective over the world).
  std::string memory_report(const MemStats& mine);

  const DeviceMesh* mesh() const { return mesh_.get(); }

 private:
  friend RunLayout make_run_layout(const Config& cfg, const Group* world);
  int zero_ = 0;
  int64_t bucket_bytes_ = 0;
  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<Group> world_, dp_group_, tp_group_, tp_kv_group_, pp_group_, tied_group_, cp_group_;
};

// Validates the mesh against the world (ConfigError with the numbers) and builds
// the groups. world may be null for a single process without MPI.
RunLayout make_run_layout(const Config& cfg, const Group* world);

}  // namespace mt

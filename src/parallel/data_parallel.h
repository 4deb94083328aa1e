// Data parallelism with ZeRO stages 0–3 over one group of ranks (the dp axis).
//
//   zero 0  parameters, gradients and AdamW state replicated. Gradients are
//           all-reduced in buckets (contiguous runs of units, about bucket_bytes
//           each) started during the last microbatch's backward as each bucket
//           fills, so reduction overlaps the rest of the backward.
//   zero 1  as 0, but AdamW state is sharded: each rank updates its shard of
//           every parameter (rows, see shard.h), then the shards are all-gathered.
//   zero 2  also gradients: each unit's gradient is reduce-scattered as soon as
//           its backward is done; a rank keeps only its shard.
//   zero 3  also parameters (FSDP): a rank stores only its shard; a unit's
//           parameters are all-gathered before its forward and again before its
//           backward, freed after use, and the next unit's gather is started
//           (prefetched) while the current unit computes.
//
// Gradients are SUMS over ranks (the loss is already normalised by the global
// valid-token count), so every stage gives the same update as one process.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "comm/group.h"
#include "comm/nodes.h"
#include "core/tensor.h"
#include "parallel/shard.h"
#include "parallel/store.h"

namespace mt {

// The ZeRO stage must be 0, 1, 2 or 3 (ConfigError naming parallel.zero otherwise).
void check_zero_stage(int64_t zero);

// HSDP (parallel.dp_shard): dp = replicas × shards, ZeRO's state sharded
// within each shard group of dp_shard consecutive dp ranks (× cp) and
// replicated over the dp / dp_shard groups.
struct DpShardLayout {
  int64_t dp_shard = 0;  // parallel.dp_shard; 0: dp
  int64_t dp = 1, zero = 0, ep = 1;
  bool canonical = false;  // parallel.reduction = canonical
};
// The shard group's dp ranks: dp_shard, or dp when it is 0.
int64_t shard_group_dp(int64_t dp_shard, int64_t dp);
// Whether the layout is HSDP (more than one shard group).
bool is_hsdp(int64_t dp_shard, int64_t dp);
// ConfigError naming parallel.dp_shard with the numbers: not a divisor of dp;
// more than one shard group at ZeRO 0 (nothing is sharded there); with
// parallel.ep > 1 (not built); in the canonical mode a shard group that is
// not a power of two (its reduce-scatter would not be an aligned subtree of
// the canonical tree over the dp ranks).
void check_dp_shard(const DpShardLayout& l);

struct DataParallelOptions {
  int zero = 0;
  int64_t bucket_bytes = 25 << 20;  // ZeRO 0/1 gradient buckets
  // How the gradients are summed over the group: the transport's own order, or
  // the canonical tree over ranks (SumOrder::tree: parallel.reduction = canonical).
  SumOrder order = SumOrder::library;
  // Expert parallelism (parallel/expert_grads.h): the parameters marked
  // expert are summed over expert_replicas (the ranks holding the same
  // experts; null or size 1: not reduced) instead of the store's group, and
  // their squares in the gradient norm over ep (the ep group). ZeRO 1-3 shard
  // them over expert_replicas (not null then), the others over the group.
  // Both must outlive the store. Null ep: no expert parallelism.
  Group* expert_replicas = nullptr;
  Group* ep = nullptr;
  // HSDP (check_dp_shard): ZeRO 1-3 shard over `shard` (a run of consecutive
  // ranks of the store's group) instead of the whole group; ZeRO 2/3 then
  // all-reduce each reduce-scattered shard over `replicas` (the ranks holding
  // the same shard). ZeRO 0/1 all-reduce the gradient over the whole group
  // as without HSDP. Null: flat ZeRO. Both must outlive the store.
  Group* shard = nullptr;
  Group* replicas = nullptr;
  // parallel.dp_allreduce = hierarchical (ZeRO 0/1, no ep, no HSDP): the
  // group cut at its nodes; each bucket reduce-scattered inside the node,
  // all-reduced across, gathered inside (dp_allreduce.h). Null: flat.
  NodeSplit* nodes = nullptr;
  int dp_shard = 0;  // the shard group's dp ranks (StoreSharding::dp_shard); 0 without HSDP
};

// Overlap of the ZeRO 0/1 bucket reductions with the backward, last step.
struct OverlapStats {
  double comm_window_s = 0;  // first bucket started → last bucket completed
  double exposed_s = 0;      // time finish_grads() waited after the backward
  double hidden_fraction() const { return comm_window_s > 0 ? 1.0 - exposed_s / comm_window_s : 0.0; }
};

class DataParallelStore : public ParamStore {
 public:
  DataParallelStore(std::vector<UnitSpec> units, Group dp, const DataParallelOptions& opts);
  ~DataParallelStore() override;

  const float* acquire_params(int unit, Pass pass) override;
  std::span<const float> resident_params() const override {
    if (opts_.zero == 3) return {};
    return {full_params_.data(), static_cast<size_t>(full_params_.numel())};
  }
  void release_params(int unit, Pass pass) override;
  float* acquire_grads(int unit) override;
  void release_grads(int unit) override;
  void poll() override { progress(); }
  StoreSharding sharding() const override;

  void begin_step(int64_t microbatches) override;
  void begin_microbatch(int64_t index, int64_t microbatch) override;
  void finish_grads() override;
  double grad_sum_squares() override;
  void grad_sum_squares_exact(ExactSum& acc) override;
  float* local_grad_of(const std::string& name, int64_t* n) override;
  float* local_param_of(const std::string& name, int64_t* n) override;
  float* local_params() override;
  float* local_grads() override;
  int64_t local_numel() const override { return opts_.zero == 0 ? full_params_.numel() : local_numel_; }
  std::vector<DecayRange> local_decay_ranges() const override;
  void after_update() override;
  void add_reduced_grads(int unit, const float* full) override;
  float* exchanged_grad_of(const std::string& name, int64_t* n) override;
  void after_grad_exchange(const std::string& name) override;
  void gather_full_params(float* out) override;
  void scatter_full_params(const float* full) override;
  void init_params(const ParamFill& fill) override;

  const OverlapStats& overlap() const { return overlap_; }
  int zero() const { return opts_.zero; }

 private:
  int64_t local_offset_of(const std::string& name, int64_t* n, int* unit) const;
  struct Bucket;
  struct Gathered;    // a unit's gathered parameters (ZeRO 3)
  struct Scattering;  // a unit's gradient reduce-scatter in flight (ZeRO 2/3)

  // A unit's local shard is one Part (every parameter over the store's group)
  // or, under expert parallelism with ZeRO 1-3, the dense parameters over the
  // group then this rank's experts over their replicas: one collective per part.
  struct Part {
    UnitShards shards;
    Group* group;
    int64_t in_shard;    // its first element within the unit's shard
    std::string suffix;  // of its collectives' labels: "" or " experts"
  };
  std::vector<Part> make_parts(const UnitSpec& unit);
  // The experts' replicas when their shards are apart (unit_parts), else 0.
  int replicas() const { return opts_.ep == nullptr || opts_.zero == 0 ? 0 : opts_.expert_replicas->size(); }
  // The unit's shard of full (the unit's elements) for this rank, into shard.
  void extract(size_t unit, const float* full, float* shard) const;
  // f(part, piece) for every piece of the unit's shard.
  template <class F>
  void for_each_piece(size_t unit, F&& f) const {
    for (const Part& part : parts_[unit]) {
      for (const auto& piece : part.shards.pieces())
        f(part, piece);
    }
  }
  float* shard_of(Tensor& t, int unit) { return t.data() + shard_offset_[static_cast<size_t>(unit)]; }
  void start_gather(int unit);
  // All-gathers unit u's shard from local_params_ into full (the unit's elements).
  void gather_unit(size_t u, float* full, const std::string& what);
  void progress();  // test in-flight operations (MPI progresses only inside MPI calls)
  // Retires finished reduce-scatters in launch order, waiting for the oldest
  // while more than `keep` are in flight.
  void retire_scatters(size_t keep);
  static constexpr size_t kScattersInFlight = 1;
  void unit_ready_for_buckets(int unit);
  void prefetch(int unit, Pass pass);
  // Communication buffers are reused: Open MPI moves data several times faster
  // through buffers it has seen before than through freshly allocated ones.
  Tensor take_comm(int64_t n);
  void give_comm(Tensor t);

  std::vector<UnitSpec> units_;
  Group dp_;
  DataParallelOptions opts_;
  Group* shard_;  // ZeRO's shards: dp_, or HSDP's shard group
  int P_ = 1;
  std::vector<std::vector<Part>> parts_;  // per unit
  std::vector<int64_t> shard_numel_;      // per unit
  std::vector<int64_t> shard_offset_;     // unit → offset of its shard in the local buffers
  int64_t local_numel_ = 0;

  Tensor full_params_;   // zero 0–2: every parameter
  Tensor full_grads_;    // zero 0–1: every gradient
  Tensor local_params_;  // zero 3: this rank's shards (storage); zero 1–2: scratch for the update
  Tensor local_grads_;   // zero 1–3: this rank's gradient shards

  // zero 0/1 buckets
  std::vector<std::unique_ptr<Bucket>> buckets_;
  Tensor node_shards_;  // the hierarchical all-reduce's shards, every bucket's
  std::unique_ptr<class HierarchicalAllReduces> hier_;  // parallel.dp_allreduce = hierarchical
  size_t hier_launched_ = 0;                            // its buckets added this step
  std::vector<int> bucket_of_unit_;
  // zero 2/3
  std::map<int, Tensor> unit_grads_;  // full-size gradient buffers of units being computed
  std::deque<std::unique_ptr<Scattering>> scattering_;
  // zero 3
  std::map<int, std::unique_ptr<Gathered>> gathered_;
  std::vector<Tensor> comm_pool_;

  int64_t microbatches_ = 1, microbatch_ = 0;
  bool sync_microbatch() const { return microbatch_ + 1 == microbatches_; }
  OverlapStats overlap_;
  double first_launch_ = -1;
};

}  // namespace mt

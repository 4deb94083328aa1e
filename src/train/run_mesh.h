// The run's device mesh and its groups: this rank's coordinate on each axis
// and the group of each axis (or set of axes) and sub-axis the training step
// communicates over, all built by the DeviceMesh (mesh/mesh.h, sub_axes.h) and
// taken from it here. It owns nothing else: stores, sums and reports are built
// from it (train_step.h, report.h).
#pragma once

#include <memory>

#include "comm/group.h"
#include "comm/nodes.h"
#include "config/config.h"
#include "config/mesh_sizes.h"
#include "mesh/mesh.h"
#include "mesh/mesh_view.h"
#include "parallel/tp2d.h"

namespace mt {

class RunMesh {
 public:
  int world_size = 1, rank = 0;
  int dp = 1, dp_rank = 0;
  int tp = 1, tp_rank = 0;
  int pp = 1, pp_rank = 0;
  int cp = 1, cp_rank = 0;
  int ep = 1, ep_rank = 0;  // ep_rank: the flattened (dp, cp) index modulo ep

  Group* world() const { return world_.get(); }  // null: one process without MPI
  // The dp × cp group: the ranks that hold different data (the dp replicas and,
  // with context parallelism, the cp shares of each sequence). Gradients, the
  // valid-token count and the loss are sums over it. Null without MPI.
  Group* dp_cp_group() const { return dp_cp_group_.get(); }
  Group* tp_group() const { return tp_group_.get(); }  // null when tp = 1
  // 2-D tp (parallel.tp2d with R > 1): the grid and its two sub-axes, tp_r
  // (the R ranks of this rank's grid column) and tp_c (the C ranks of its grid
  // row), tp rank t = r·C + c (mesh/sub_axes.h). Null otherwise.
  tp2d::Grid grid;
  Group* tp_r_group() const { return tp_r_group_.get(); }
  Group* tp_c_group() const { return tp_c_group_.get(); }
  // The tp ranks sharing a kv head when tp > n_kv_heads (null otherwise), for the model.
  Group* tp_kv_group() const { return tp_kv_group_.get(); }
  Group* pp_group() const { return pp_group_.get(); }  // null when pp = 1
  Group* cp_group() const { return cp_group_.get(); }  // null when cp = 1
  // Hybrid cp (parallel.cp_impl = hybrid): the all-to-all group of
  // parallel.cp_ulysses consecutive cp ranks and the ring across those groups
  // (mesh/sub_axes.h cp_a2a, cp_ring). Null otherwise.
  Group* cp_a2a_group() const { return cp_a2a_group_.get(); }
  Group* cp_ring_group() const { return cp_ring_group_.get(); }
  // With tied embeddings over pp > 1: the first and the last pp rank, which
  // hold the two copies of the embedding (null on the other ranks).
  Group* tied_group() const { return tied_group_.get(); }
  // Expert parallelism (docs/PARALLELISM.md "Expert parallelism"): the ep
  // group, a run of ep consecutive ranks of the flattened (dp, cp) index, which
  // exchanges tokens; and the expert replica group, the dp·cp/ep ranks with
  // this rank's ep coordinate, which hold the same experts and sum their
  // gradients. Both null when ep = 1.
  Group* ep_group() const { return ep_group_.get(); }
  Group* expert_replica_group() const { return expert_replica_group_.get(); }
  // HSDP (parallel.dp_shard < dp): the shard group, dp_shard consecutive dp
  // ranks (× cp) over which ZeRO shards, and the replica group, the dp /
  // dp_shard ranks holding this rank's shard (mesh/sub_axes.h dp_shard,
  // dp_replicas). Both null, and dp_shard 0, without HSDP.
  int dp_shard = 0;
  Group* shard_group() const { return shard_group_.get(); }
  Group* replica_group() const { return replica_group_.get(); }
  // parallel.dp_allreduce = hierarchical: the dp × cp group cut at the job's
  // nodes (comm/nodes.h split_by_node); null otherwise.
  NodeSplit* dp_nodes() const { return dp_nodes_.get(); }
  const DeviceMesh* mesh() const { return mesh_.get(); }  // null without MPI
  // The groups a model chunk reads (ModelOptions::mesh), by axis name: the one
  // place they are picked from the groups above.
  MeshView view() const {
    return MeshView{.tp = tp_group(),
                    .tp_r = tp_r_group(),
                    .tp_c = tp_c_group(),
                    .tp_kv = tp_kv_group(),
                    .cp = cp_group(),
                    .cp_a2a = cp_a2a_group(),
                    .cp_ring = cp_ring_group(),
                    .ep = ep_group(),
                    .dp_cp = dp * cp > 1 ? dp_cp_group() : nullptr};
  }

 private:
  friend RunMesh make_run_mesh(const Config& cfg, const Group* world);
  std::unique_ptr<DeviceMesh> mesh_;
  std::unique_ptr<Group> world_, dp_cp_group_, tp_group_, tp_kv_group_, pp_group_, tied_group_, cp_group_,
      ep_group_, expert_replica_group_, tp_r_group_, tp_c_group_, shard_group_, replica_group_, cp_a2a_group_,
      cp_ring_group_;
  std::unique_ptr<NodeSplit> dp_nodes_;
};

// Builds the groups (collective over `world`). The mesh must fit the world
// (validate_run, trainer.h). world may be null for a single process without MPI.
RunMesh make_run_mesh(const Config& cfg, const Group* world);

}  // namespace mt

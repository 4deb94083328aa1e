#include "train/run_mesh.h"

#include <optional>

#include "parallel/data_parallel.h"
#include "parallel/dp_allreduce.h"
#include "parallel/tp_plan.h"

namespace mt {

namespace {

// What the run asks of the mesh's sub-axes (mesh/sub_axes.h).
SubAxisSizes sub_axis_sizes(const Config& cfg, const tp2d::Grid& grid) {
  const int tp = static_cast<int>(cfg.parallel.tp);
  return {
      .ep = static_cast<int>(cfg.parallel.ep),
      .tp_rows = grid.two_d() ? static_cast<int>(grid.rows) : 1,
      .kv_replicas = tp::kv_replicas(tp, cfg.model.n_kv_heads),
      .tied_ends = cfg.model.tie_embeddings,
      .shard_ranks = is_hsdp(cfg.parallel.dp_shard, cfg.parallel.dp)
                         ? static_cast<int>(cfg.parallel.dp_shard * cfg.parallel.cp)
                         : 0,
      .cp_a2a = cfg.parsed().cp_impl == cp::CpImpl::hybrid ? static_cast<int>(cfg.parallel.cp_ulysses) : 0};
}

std::unique_ptr<Group> held(std::optional<Group> g) {
  return g ? std::make_unique<Group>(std::move(*g)) : nullptr;
}

}  // namespace

RunMesh make_run_mesh(const Config& cfg, const Group* world) {
  RunMesh m;
  const MeshSizes sizes = mesh_sizes(cfg.parallel);
  m.dp = sizes.dp;
  m.tp = sizes.tp;
  m.pp = sizes.pp;
  m.cp = sizes.cp;
  m.grid = cfg.parsed().tp_grid;
  if (world == nullptr) return m;
  m.ep = static_cast<int>(cfg.parallel.ep);
  // On a device other than the host, every group stages its device buffers
  // through host memory (comm/staged_backend.h); on the host it is the world itself.
  m.world_ = std::make_unique<Group>(world->for_run_device());
  m.world_size = world->size();
  m.rank = world->rank();
  m.mesh_ = std::make_unique<DeviceMesh>(*m.world_, sizes, sub_axis_sizes(cfg, m.grid));  // every group
  const DeviceMesh& mesh = *m.mesh_;
  m.dp_rank = mesh.coord(Axis::dp);
  m.dp_cp_group_ = std::make_unique<Group>(mesh.group(m.cp > 1 ? "dp+cp" : "dp"));
  m.cp_rank = mesh.coord(Axis::cp);
  if (m.cp > 1) m.cp_group_ = std::make_unique<Group>(mesh.group("cp"));
  m.cp_a2a_group_ = held(mesh.sub_group(SubAxis::cp_a2a));
  m.cp_ring_group_ = held(mesh.sub_group(SubAxis::cp_ring));
  m.ep_group_ = held(mesh.sub_group(SubAxis::ep));
  m.expert_replica_group_ = held(mesh.sub_group(SubAxis::ep_replicas));
  if (m.ep_group_) m.ep_rank = m.ep_group_->rank();  // the flattened (dp, cp) index modulo ep
  m.tp_rank = mesh.coord(Axis::tp);
  if (m.tp > 1) m.tp_group_ = std::make_unique<Group>(mesh.group("tp"));
  m.tp_r_group_ = held(mesh.sub_group(SubAxis::tp_r));
  m.tp_c_group_ = held(mesh.sub_group(SubAxis::tp_c));
  m.tp_kv_group_ = held(mesh.sub_group(SubAxis::tp_kv));
  m.pp_rank = mesh.coord(Axis::pp);
  if (m.pp > 1) m.pp_group_ = std::make_unique<Group>(mesh.group("pp"));
  m.tied_group_ = held(mesh.sub_group(SubAxis::pp_tied));
  m.shard_group_ = held(mesh.sub_group(SubAxis::dp_shard));
  m.replica_group_ = held(mesh.sub_group(SubAxis::dp_replicas));
  if (m.shard_group_) m.dp_shard = static_cast<int>(cfg.parallel.dp_shard);
  if (cfg.parsed().dp_allreduce == DpAllReduce::hierarchical) {
    m.dp_nodes_ = std::make_unique<NodeSplit>(split_by_node(*m.dp_cp_group_));
    if (cfg.parsed().reduction == Reduction::canonical)
      check_canonical_nodes(*m.dp_nodes_, m.dp_cp_group_->axis());
  }
  return m;
}

}  // namespace mt

#include "train/run_mesh.h"

#include "parallel/tp2d_linear.h"
#include "parallel/tp_plan.h"

namespace mt {

RunMesh make_run_mesh(const Config& cfg, const Group* world) {
  RunMesh m;
  const MeshSizes sizes = mesh_sizes(cfg.parallel);
  m.dp = sizes.dp;
  m.tp = sizes.tp;
  m.pp = sizes.pp;
  m.cp = sizes.cp;
  m.grid = cfg.parsed().tp_grid;
  if (world == nullptr) return m;
  m.world_ = std::make_unique<Group>(*world);
  m.world_size = world->size();
  m.rank = world->rank();
  m.mesh_ = std::make_unique<DeviceMesh>(*world, sizes);
  m.dp_rank = m.mesh_->coord(Axis::dp);
  m.dp_cp_group_ = std::make_unique<Group>(m.mesh_->group(m.cp > 1 ? "dp+cp" : "dp"));
  m.cp_rank = m.mesh_->coord(Axis::cp);
  if (m.cp > 1) m.cp_group_ = std::make_unique<Group>(m.mesh_->group("cp"));
  m.ep = static_cast<int>(cfg.parallel.ep);
  if (m.ep > 1) {  // collective over dp × cp
    const int flat = m.dp_cp_group_->rank();
    m.ep_rank = flat % m.ep;
    m.ep_group_ = std::make_unique<Group>(m.dp_cp_group_->split(flat / m.ep, m.ep_rank, "ep"));
    m.expert_replica_group_ =
        std::make_unique<Group>(m.dp_cp_group_->split(m.ep_rank, flat / m.ep, "ep_replicas"));
  }
  m.tp_rank = m.mesh_->coord(Axis::tp);
  if (m.tp > 1) m.tp_group_ = std::make_unique<Group>(m.mesh_->group("tp"));
  if (m.grid.two_d()) {  // collective over tp
    tp2d::SubAxes ax = tp2d::sub_axes(*m.tp_group_, m.grid);
    m.tp_r_group_ = std::move(ax.tp_r);
    m.tp_c_group_ = std::move(ax.tp_c);
  }
  m.tp_kv_group_ = tp::kv_replica_group(m.tp_group_.get(), cfg.model.n_kv_heads);  // collective over tp
  m.pp_rank = m.mesh_->coord(Axis::pp);
  if (m.pp > 1) {
    m.pp_group_ = std::make_unique<Group>(m.mesh_->group("pp"));
    if (cfg.model.tie_embeddings) {  // the first and the last stage (collective over pp)
      const bool ends = m.pp_rank == 0 || m.pp_rank == m.pp - 1;
      m.tied_group_ = std::make_unique<Group>(m.pp_group_->split(ends ? 0 : 1, m.pp_rank, "pp_tied"));
      if (!ends) m.tied_group_.reset();
    }
  }
  return m;
}

}  // namespace mt

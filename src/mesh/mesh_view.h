// MeshView: the groups of the device mesh a model chunk communicates over, by
// axis name, as one value. The run builds it in one place (RunMesh::view,
// train/run_mesh.h) from the groups the DeviceMesh built (mesh.h, sub_axes.h);
// a test or a tool without a mesh sets the members it needs. It owns nothing:
// the groups live in the run's mesh.
//
// RunMesh::view leaves a member null when its axis is 1 (or not built); a
// size-1 group means the same as null (the model reads tp and cp through live()).
#pragma once

#include "comm/group.h"

namespace mt {

struct MeshView {
  // tp: this rank's tensor-parallel group. The model holds and computes this
  // rank's shard (model/params.h) and communicates over tp itself.
  Group* tp = nullptr;
  // tp_r, tp_c: on an R × C grid of the tp ranks (R > 1; parallel/tp_placement.h),
  // the R ranks of this rank's grid column and the C ranks of its grid row
  // (tp rank t = r·C + c). Null on 1-D tp.
  Group* tp_r = nullptr;
  Group* tp_c = nullptr;
  // tp_kv: the tp ranks sharing this rank's kv heads when tp > n_kv_heads (the
  // mesh's tp_kv sub-axis); null otherwise.
  Group* tp_kv = nullptr;
  // cp: this rank's context-parallel group, over which attention exchanges keys
  // and values (parallel/context_parallel.h).
  Group* cp = nullptr;
  // cp_a2a, cp_ring: under hybrid context parallelism, the all-to-all group of
  // consecutive cp ranks and the ring across those groups (parallel/cp_ulysses.h;
  // the mesh's cp_a2a and cp_ring sub-axes). Null otherwise.
  Group* cp_a2a = nullptr;
  Group* cp_ring = nullptr;
  // ep: this rank's expert-parallel group, over which the MoE layers exchange
  // tokens (parallel/expert_parallel.h); null: every expert here.
  Group* ep = nullptr;
  // dp_cp: the ranks whose tokens differ (dp × cp), over which aux-loss-free
  // balancing sums the step's per-expert counts; null when dp × cp = 1.
  Group* dp_cp = nullptr;

  // g, or null when g has one rank: whether an axis is on.
  static Group* live(Group* g) { return g != nullptr && g->size() > 1 ? g : nullptr; }
};

}  // namespace mt

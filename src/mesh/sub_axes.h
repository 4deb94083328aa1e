// Sub-axes of the device mesh: the groups one feature needs inside an axis (or
// a set of axes) of the mesh, as blocks of its coordinates, so that none adds a
// rank axis. Pure functions (no communication); DeviceMesh (mesh.h) builds the
// groups from them, once, in its constructor.
//
//   sub-axis     parent   members (f, t, p: this rank's index in the parent)  built when
//   ep           dp+cp    the run of `ep` consecutive f with f / ep equal      ep > 1
//   ep_replicas  dp+cp    the dp·cp / ep ranks with f mod ep equal             ep > 1
//   tp_c         tp       grid row r of t = r·C + c (C ranks, ordered by c)   tp_rows > 1
//   tp_r         tp       grid column c (R = tp_rows ranks, ordered by r)     tp_rows > 1
//   tp_kv        tp       the kv_replicas adjacent t sharing one kv head       kv_replicas > 1
//   pp_tied      pp       the first and the last stage (tied embeddings)       tied_ends, pp > 1
//   dp_shard     dp+cp    HSDP's shard group: the run of shard_ranks           0 < shard_ranks < dp·cp
//                         consecutive f with f / shard_ranks equal
//   dp_replicas  dp+cp    the dp·cp / shard_ranks ranks with f mod shard_ranks  as dp_shard
//                         equal (they hold the same shard)
//   cp_a2a       cp       the run of cp_a2a consecutive c with c / cp_a2a      1 < cp_a2a < cp
//                         equal (the hybrid's all-to-all, parallel/cp_ulysses.h)
//   cp_ring      cp       the cp / cp_a2a ranks with c mod cp_a2a equal       as cp_a2a
//                         (the hybrid's ring across the all-to-all groups)
//
// f, the flattened (dp, cp) index dp·CP + cp, makes a shard group
// parallel.dp_shard consecutive dp ranks with all their cp ranks: the
// closest ranks of the data-parallel group (the fast links), and an aligned
// block of the canonical tree over the dp ranks.
// Each group's axis name (the comm ledger's) is the sub-axis's name.
#pragma once

#include <array>

#include "mesh/mesh_shape.h"

namespace mt {

enum class SubAxis : int {
  ep = 0,
  ep_replicas,
  tp_c,
  tp_r,
  tp_kv,
  pp_tied,
  dp_shard,
  dp_replicas,
  cp_a2a,
  cp_ring
};
inline constexpr int kNumSubAxes = 10;
// In the order DeviceMesh builds them (every rank splits in this order).
inline constexpr std::array<SubAxis, kNumSubAxes> kAllSubAxes = {
    SubAxis::ep,      SubAxis::ep_replicas, SubAxis::tp_c,        SubAxis::tp_r,   SubAxis::tp_kv,
    SubAxis::pp_tied, SubAxis::dp_shard,    SubAxis::dp_replicas, SubAxis::cp_a2a, SubAxis::cp_ring};

// "ep", "ep_replicas", "tp_c", "tp_r", "tp_kv", "pp_tied", "dp_shard", "dp_replicas", "cp_a2a", "cp_ring"
const char* sub_axis_name(SubAxis s);

// What the run asks of each sub-axis (the defaults build none).
struct SubAxisSizes {
  int ep = 1;              // expert parallelism: ranks of dp × cp exchanging tokens
  int tp_rows = 1;         // R of a 2-D R × C tp grid (C = tp / R); 1: 1-D tp
  int kv_replicas = 1;     // tp ranks holding the same kv head (tp / n_kv_heads when tp > n_kv_heads)
  bool tied_ends = false;  // tied embeddings: a group of the first and the last pp stage
  int shard_ranks = 0;     // HSDP: ranks of dp × cp in a shard group (parallel.dp_shard × cp); 0: none
  int cp_a2a = 0;          // hybrid cp: ranks of cp in an all-to-all group (parallel.cp_ulysses); 0: none
  bool operator==(const SubAxisSizes&) const = default;
};

// The axes a sub-axis is carved from.
AxisSet sub_axis_parent(SubAxis s);
// Whether the mesh builds sub-axis s.
bool sub_axis_built(SubAxis s, const MeshSizes& sizes, const SubAxisSizes& sub);
// Throws ConfigError with the numbers when a sub-axis does not divide its parent.
void validate_sub_axes(const MeshSizes& sizes, const SubAxisSizes& sub);

// The split of the parent group that forms sub-axis s, for the member with
// index i in the parent (of n): ranks with the same color form one group,
// ordered by key. keep: whether this member holds the group (pp_tied: only
// the first and the last stage do).
struct SubAxisSplit {
  int color = 0, key = 0;
  bool keep = true;
};
SubAxisSplit sub_axis_split(SubAxis s, int i, int n, const SubAxisSizes& sub);

}  // namespace mt

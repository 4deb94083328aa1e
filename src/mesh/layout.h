// Layouts of distributed tensors: a global shape and, for each mesh axis, a
// placement (PyTorch DTensor's vocabulary):
//   Replicate  every rank of the axis holds the whole tensor;
//   Shard(d)   the axis splits tensor dim d, rank i of the axis holds piece i;
//   Partial    every rank holds a full-shaped addend; the tensor is their sum.
// A change of placement is one collective (Partial → Replicate: all-reduce;
// Partial → Shard: reduce-scatter; Shard → Replicate: all-gather), as
// docs/PARALLELISM.md explains per axis; the parallel/ code performs them.
//
// Uneven sizes use the PADDED convention (the one ZeRO uses for flat buffers):
// a dim of n rows split k ways gives every shard ceil(n/k) rows; the real rows
// of shard i are shard_range(n, k, i), and the rest of its rows (at the end of
// the last shards, possibly all of them) are padding. Padding holds zeros and
// is never read into real rows, so collectives always exchange equal blocks. Example: n = 5, k = 4 → every
// shard has 2 rows; shards hold rows [0,2), [2,4), [4,5)+1 pad, and 2 pad. When several axes shard the same
// dim they split it in rank order (dp, pp, cp, tp: outermost first), each splitting the padded extent left by
// the previous one; Layout::order can say otherwise. ZeRO/FSDP over TP is such a layout: tp cuts the TP piece
// first, then the store's group (dp, or dp × cp taken as ONE flattened axis, rounding up once) shards that
// piece's dim 0 — zero_layout below.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mesh/mesh_shape.h"

namespace mt {

class Placement {
 public:
  enum class Kind { replicate, shard, partial };

  Placement() = default;  // Replicate
  static Placement replicate() { return Placement(Kind::replicate, -1); }
  static Placement shard(int dim) { return Placement(Kind::shard, dim); }
  static Placement partial() { return Placement(Kind::partial, -1); }  // sum

  Kind kind() const { return kind_; }
  bool is_replicate() const { return kind_ == Kind::replicate; }
  bool is_shard() const { return kind_ == Kind::shard; }
  bool is_shard(int dim) const { return kind_ == Kind::shard && dim_ == dim; }
  bool is_partial() const { return kind_ == Kind::partial; }
  int dim() const { return dim_; }  // the sharded tensor dim; -1 unless a shard

  bool operator==(const Placement&) const = default;
  std::string to_string() const;  // "R", "S(0)", "P"

 private:
  Placement(Kind kind, int dim) : kind_(kind), dim_(dim) {}
  Kind kind_ = Kind::replicate;
  int dim_ = -1;
};

// Rows per shard: ceil(n / k).
int64_t padded_shard_size(int64_t n, int k);
// The real rows [begin, end) of shard `index` of n rows split k ways (padded
// convention); begin == end for a shard that is all padding.
std::pair<int64_t, int64_t> shard_range(int64_t n, int k, int index);

struct Layout {
  std::vector<int64_t> shape;                  // global, row-major
  std::array<Placement, kNumAxes> placements;  // indexed by Axis; all Replicate by default
  // Who splits a sharded dim first, outermost first: each entry a set of shard
  // axes acting as one flattened axis (its coordinate flattened in rank order,
  // its size the product, the padded rule applied once). Empty: every shard
  // axis on its own, in rank order. Otherwise every shard axis is in exactly one entry.
  std::vector<AxisSet> order;
  // Coordinates per piece on each shard axis: with replicas[a] = r, the
  // sizes[a] coordinates of axis a hold sizes[a] / r pieces, coordinates
  // c·r … c·r + r − 1 all piece c (a kv head replicated on the r tp ranks whose
  // query heads use it). 1: every coordinate holds its own piece. For an
  // order entry of several axes the product of their replicas applies to the
  // flattened coordinate (an expert's ZeRO shard: replicas = ep on dp+cp).
  std::array<int, kNumAxes> replicas{1, 1, 1, 1};
  // Expert placement (docs/PARALLELISM.md "Expert parallelism"): with
  // expert_coord ≥ 0 the tensor is held only by the ranks whose ep coordinate
  // — their flattened (dp, cp) index dp·cp_size + cp, modulo ep — is
  // expert_coord, replicated among them; the placements say the rest. −1: not
  // restricted (every tensor without expert parallelism).
  int ep = 1, expert_coord = -1, ep_cp_size = 1;
  // 2-D tensor parallelism (parallel/tp2d.h, docs/PARALLELISM.md "2-D tensor
  // parallelism"): with grid_rows = R > 1 the tp axis is an R × C grid, tp
  // coordinate t = r·C + c. Its Shard(d) then splits dim d over the C ranks of
  // the coordinate's grid row (tp_c, coordinate c), and dim grid_dim over the R
  // ranks of its grid column (tp_r, coordinate r), both at tp's place in the
  // split order. R = 1: tp splits one dim over all its ranks.
  int grid_rows = 1, grid_dim = -1;
  // HSDP (docs/PARALLELISM.md "HSDP"): with dp_shard = k > 0 the dp axis
  // shards over its k-coordinate shard groups only: dp coordinate d holds
  // piece d mod k (flattened with the axes after dp in its order entry), and
  // the dp / k groups hold the same pieces. The shard groups are runs of
  // consecutive dp ranks. 0: dp shards over all of its coordinates.
  int dp_shard = 0;

  Layout() = default;
  explicit Layout(std::vector<int64_t> global_shape) : shape(std::move(global_shape)) {}
  Layout(std::vector<int64_t> global_shape, std::array<Placement, kNumAxes> per_axis)
      : shape(std::move(global_shape)), placements(per_axis) {}

  const Placement& placement(Axis a) const { return placements[static_cast<size_t>(axis_index(a))]; }
  // A copy with axis `a` placed as `p`: Layout({6, 5}).with(Axis::tp, Placement::shard(1)).
  Layout with(Axis a, Placement p) const;
  // The entries of `order`, or each shard axis alone in rank order when it is empty.
  std::vector<AxisSet> split_order() const;
  // Throws ConfigError when a Shard names a dim the shape does not have, or
  // `order` misses a shard axis or groups axes sharding different dims.
  void validate() const;
  bool operator==(const Layout&) const = default;
  // "[6, 5] tp:S(1)" (Replicate axes omitted; "R" if all are; " order tp,dp+cp"); on a 2-D
  // tp grid "[6, 5] tp:S(0)/c+S(1)/r(2 rows)" (dim 0 over tp_c, dim 1 over tp_r).
  std::string to_string() const;
};

// The layout of a parameter's piece sharded by a ZeRO/FSDP store: `param`
// (its layout over tp) with dim 0 of each tp piece sharded over `group`
// (dp or dp+cp) as one flattened axis, after tp. The rows a rank holds are
// then those of parallel/shard.h's UnitShards.
// dp_shard > 0: HSDP, the pieces over shard groups of dp_shard dp ranks (Layout::dp_shard).
Layout zero_layout(const Layout& param, AxisSet group, int dp_shard = 0);

// Copies between a full row-major tensor (layout.shape) and the piece the rank
// at `coords` holds (local_shape, row-major): to_local zeroes the padding,
// to_full writes only the real elements. The slice reader of checkpoints.
void copy_to_local(const Layout& layout, const MeshSizes& sizes, const MeshCoords& coords, const float* full,
                   float* local);
void copy_to_full(const Layout& layout, const MeshSizes& sizes, const MeshCoords& coords, const float* local,
                  float* full);

// Whether the rank at `coords` is the lowest of the ranks holding the same
// piece: coordinate 0 on every axis the layout replicates, the first of each
// group of replicas on a sharded axis. pp is skipped: a pipeline stage holds
// its own tensors, so pp never replicates one. The one writer of a piece when
// a save or a checkpoint writes each piece once.
bool first_holder(const Layout& layout, const MeshCoords& coords);

// The shape of this rank's piece (padded), and its element count.
std::vector<int64_t> local_shape(const Layout& layout, const MeshSizes& sizes);
int64_t local_numel(const Layout& layout, const MeshSizes& sizes);
// The real global rows [begin, end) of `dim` held by the rank at `coords`.
std::pair<int64_t, int64_t> local_range(const Layout& layout, int dim, const MeshSizes& sizes,
                                        const MeshCoords& coords);

}  // namespace mt

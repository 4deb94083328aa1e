// Layouts of distributed tensors: a global shape and, for each mesh axis, a
// placement (PyTorch DTensor's vocabulary):
//   Replicate  every rank of the axis holds the whole tensor;
//   Shard(d)   the axis splits tensor dim d, rank i of the axis holds piece i;
//   Partial    every rank holds a full-shaped addend; the tensor is their sum.
// Every change of placement is one collective (DESIGN §1); see redistribute.h.
//
// Uneven sizes use the PADDED convention (the one ZeRO uses for flat buffers):
// a dim of n rows split k ways gives every shard ceil(n/k) rows; the real rows
// of shard i are shard_range(n, k, i), and the rest of its rows (at the end of
// the last shards, possibly all of them) are padding. Padding is written as
// zeros by redistribute and never read into real rows, so collectives always
// exchange equal blocks. Example: n = 5, k = 4 → every shard has 2 rows;
// shards hold rows [0,2), [2,4), [4,5)+1 pad, and 2 pad.
// When several axes shard the same dim they split it in rank order (dp, pp,
// cp, tp: outermost first), each splitting the padded extent left by the
// previous one.
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

  Layout() = default;
  explicit Layout(std::vector<int64_t> global_shape) : shape(std::move(global_shape)) {}
  Layout(std::vector<int64_t> global_shape, std::array<Placement, kNumAxes> per_axis)
      : shape(std::move(global_shape)), placements(per_axis) {}

  const Placement& placement(Axis a) const { return placements[static_cast<size_t>(axis_index(a))]; }
  // A copy with axis `a` placed as `p`: Layout({6, 5}).with(Axis::tp, Placement::shard(1)).
  Layout with(Axis a, Placement p) const;
  // Throws ConfigError when a Shard names a dim the shape does not have.
  void validate() const;
  bool operator==(const Layout&) const = default;
  std::string to_string() const;  // "[6, 5] tp:S(1)" (Replicate axes omitted; "R" if all are)
};

// The shape of this rank's piece (padded), and its element count.
std::vector<int64_t> local_shape(const Layout& layout, const MeshSizes& sizes);
int64_t local_numel(const Layout& layout, const MeshSizes& sizes);
// The real global rows [begin, end) of `dim` held by the rank at `coords`.
std::pair<int64_t, int64_t> local_range(const Layout& layout, int dim, const MeshSizes& sizes,
                                        const MeshCoords& coords);

}  // namespace mt

#include "mesh/layout.h"

#include <algorithm>

#include "core/error.h"

namespace mt {

std::string Placement::to_string() const {
  switch (kind_) {
    case Kind::replicate:
      return "R";
    case Kind::shard:
      return "S(" + std::to_string(dim_) + ")";
    case Kind::partial:
      return "P";
  }
  return "?";
}

int64_t padded_shard_size(int64_t n, int k) {
  MT_CHECK(n >= 0 && k >= 1, "n ", n, " k ", k);
  return (n + k - 1) / k;
}

std::pair<int64_t, int64_t> shard_range(int64_t n, int k, int index) {
  MT_CHECK(index >= 0 && index < k, "shard ", index, " of ", k);
  const int64_t c = padded_shard_size(n, k);
  const int64_t begin = std::min(n, c * index);
  return {begin, std::min(n, begin + c)};
}

Layout Layout::with(Axis a, Placement p) const {
  Layout out = *this;
  out.placements[static_cast<size_t>(axis_index(a))] = p;
  return out;
}

std::vector<AxisSet> Layout::split_order() const {
  if (!order.empty()) return order;
  std::vector<AxisSet> out;
  for (Axis a : kRankOrder) {
    if (placement(a).is_shard()) out.push_back(axis_bit(a));
  }
  return out;
}

void Layout::validate() const {
  AxisSet ordered = 0;
  for (AxisSet set : order) {
    int dim = -2;
    for (Axis a : kAllAxes) {
      if (!(set & axis_bit(a))) continue;
      MT_REQUIRE(
          placement(a).is_shard() && (dim == -2 || placement(a).dim() == dim) && !(ordered & axis_bit(a)),
          ConfigError, "layout ", to_string(), ": order entry ", axis_set_name(set),
          " must name shard axes of one dim, each once");
      dim = placement(a).dim();
    }
    ordered |= set;
  }
  for (Axis a : kAllAxes) {
    const Placement& p = placement(a);
    MT_REQUIRE(!p.is_shard() || (p.dim() >= 0 && p.dim() < static_cast<int>(shape.size())), ConfigError,
               "layout ", to_string(), ": ", axis_name(a), " shards dim ", p.dim(), " but the tensor has ",
               shape.size(), " dims");
    MT_REQUIRE(order.empty() || !p.is_shard() || (ordered & axis_bit(a)), ConfigError, "layout ", to_string(),
               ": ", axis_name(a), " shards but is not in the order");
    const int r = replicas[static_cast<size_t>(axis_index(a))];
    MT_REQUIRE(r >= 1 && (r == 1 || p.is_shard()), ConfigError, "layout ", to_string(), ": ", axis_name(a),
               " has ", r, " replicas per piece but does not shard");
  }
  MT_REQUIRE(dp_shard == 0 || (dp_shard > 0 && placement(Axis::dp).is_shard() &&
                               replicas[static_cast<size_t>(axis_index(Axis::dp))] == 1),
             ConfigError, "layout ", to_string(), ": HSDP's shard groups (dp_shard ", dp_shard,
             ") need dp to shard, one piece per coordinate of a group");
  for (int64_t n : shape)
    MT_REQUIRE(n >= 0, ConfigError, "layout ", to_string(), ": negative size");
  if (grid_rows == 1) return;
  const Placement& t = placement(Axis::tp);
  MT_REQUIRE(grid_rows > 1 && t.is_shard() && grid_dim >= 0 && grid_dim < static_cast<int>(shape.size()) &&
                 grid_dim != t.dim() && replicas[static_cast<size_t>(axis_index(Axis::tp))] == 1,
             ConfigError, "layout ", to_string(),
             ": a 2-D tp grid shards two different dims of the tensor, one piece per tp rank");
  for (AxisSet set : order)
    MT_REQUIRE(!(set & axis_bit(Axis::tp)) || set == axis_bit(Axis::tp), ConfigError, "layout ", to_string(),
               ": a 2-D tp grid is an order entry of its own");
}

std::string Layout::to_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  s += "]";
  bool any = false;
  for (Axis a : kAllAxes) {
    if (placement(a).is_replicate()) continue;
    s += std::string(" ") + axis_name(a) + ":" + placement(a).to_string();
    if (a == Axis::tp && grid_rows > 1)
      s += "/c+S(" + std::to_string(grid_dim) + ")/r(" + std::to_string(grid_rows) + " rows)";
    const int r = replicas[static_cast<size_t>(axis_index(a))];
    if (r > 1) {
      s += 'x';
      s += std::to_string(r);
    }
    any = true;
  }
  if (!any) s += " R";
  if (!order.empty()) {
    s += " order ";
    for (size_t i = 0; i < order.size(); ++i) {
      if (i > 0) s += ",";
      s += axis_set_name(order[i]);
    }
  }
  if (dp_shard > 0) s += " dp_shard:" + std::to_string(dp_shard);
  if (expert_coord >= 0) s += " ep:" + std::to_string(expert_coord) + "/" + std::to_string(ep);
  return s;
}

namespace {

// An entry of the split order as one axis: the dim it shards, its size and
// the coordinate of `coords` on it (flattened in rank order).
struct FlatAxis {
  int dim = -1;
  int size = 1, coord = 0;
};
FlatAxis flat_axis(const Layout& layout, AxisSet set, const MeshSizes& sizes, const MeshCoords* coords) {
  FlatAxis f;
  int r = 1;  // the entry's replicas per piece: the product of its axes', on the flattened coordinate
  for (Axis a : kRankOrder) {
    if (!(set & axis_bit(a))) continue;
    f.dim = layout.placement(a).dim();
    r *= layout.replicas[static_cast<size_t>(axis_index(a))];
    int n = sizes[a], c = coords != nullptr ? (*coords)[static_cast<size_t>(axis_index(a))] : 0;
    if (a == Axis::dp && layout.dp_shard > 0) {  // HSDP: the coordinate within its shard group
      MT_REQUIRE(n % layout.dp_shard == 0, ConfigError, "layout ", layout.to_string(), ": dp (", n,
                 ") is not a multiple of its shard groups' ", layout.dp_shard, " ranks");
      n = layout.dp_shard;
      c %= n;
    }
    f.size *= n;
    f.coord = f.coord * n + c;
  }
  MT_REQUIRE(f.size % r == 0, ConfigError, "layout ", layout.to_string(), ": ", axis_set_name(set), " (",
             f.size, ") is not a multiple of its ", r, " replicas");
  f.size /= r;
  f.coord /= r;
  return f;
}

// Every split of the layout, in order: its entries, and on a 2-D tp grid
// tp's entry as two (dim over tp_c, then grid_dim over tp_r).
std::vector<FlatAxis> flat_splits(const Layout& layout, const MeshSizes& sizes, const MeshCoords* coords) {
  layout.validate();
  std::vector<FlatAxis> out;
  for (AxisSet set : layout.split_order()) {
    FlatAxis f = flat_axis(layout, set, sizes, coords);
    if (set == axis_bit(Axis::tp) && layout.grid_rows > 1) {
      const int R = layout.grid_rows;
      MT_REQUIRE(f.size % R == 0, ConfigError, "layout ", layout.to_string(), ": tp (", f.size,
                 ") is not a multiple of the grid's ", R, " rows");
      FlatAxis r{layout.grid_dim, R, f.coord / (f.size / R)};
      f.coord %= f.size / R;
      f.size /= R;
      out.push_back(f);
      out.push_back(r);
      continue;
    }
    out.push_back(f);
  }
  return out;
}

}  // namespace

Layout zero_layout(const Layout& param, AxisSet group, int dp_shard) {
  Layout out = param;
  out.dp_shard = dp_shard;
  out.order.clear();
  const std::vector<AxisSet> inner = param.split_order();
  for (Axis a : kAllAxes) {
    if (group & axis_bit(a)) out = out.with(a, Placement::shard(0));
  }
  out.order = inner;
  out.order.push_back(group);
  out.validate();
  return out;
}

std::vector<int64_t> local_shape(const Layout& layout, const MeshSizes& sizes) {
  std::vector<int64_t> shape = layout.shape;
  for (const FlatAxis& f : flat_splits(layout, sizes, nullptr)) {
    int64_t& n = shape[static_cast<size_t>(f.dim)];
    n = padded_shard_size(n, f.size);
  }
  return shape;
}

int64_t local_numel(const Layout& layout, const MeshSizes& sizes) {
  int64_t n = 1;
  for (int64_t s : local_shape(layout, sizes))
    n *= s;
  return n;
}

std::pair<int64_t, int64_t> local_range(const Layout& layout, int dim, const MeshSizes& sizes,
                                        const MeshCoords& coords) {
  MT_CHECK(dim >= 0 && dim < static_cast<int>(layout.shape.size()), "dim ", dim);
  // Each split cuts the piece left by the previous one (padded extent, real
  // rows a prefix of it): its real rows end where that piece's do, as
  // shard_range's do.
  int64_t begin = 0, extent = layout.shape[static_cast<size_t>(dim)], real = extent;
  for (const FlatAxis& f : flat_splits(layout, sizes, &coords)) {
    if (f.dim != dim) continue;
    extent = padded_shard_size(extent, f.size);
    const int64_t skip = extent * f.coord;
    begin += std::min(skip, real);  // an all-padding piece sits at the end of the real rows
    real = std::clamp<int64_t>(real - skip, 0, extent);
  }
  return {begin, begin + real};
}

namespace {

// Calls f(full_offset, local_offset, n) for each run of real elements along
// the last dim of the piece at `coords`.
template <class F>
void for_each_block_run(const Layout& layout, const MeshSizes& sizes, const MeshCoords& coords, F&& f) {
  const std::vector<int64_t> local = local_shape(layout, sizes);
  const size_t nd = local.size();
  std::vector<std::pair<int64_t, int64_t>> range(nd);
  for (size_t d = 0; d < nd; ++d)
    range[d] = local_range(layout, static_cast<int>(d), sizes, coords);
  const int64_t last = nd == 0 ? 1 : local[nd - 1];
  const int64_t run = nd == 0 ? 1 : range[nd - 1].second - range[nd - 1].first;
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < nd; ++d)
    outer *= local[d];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rest = o, full_off = 0, stride = 1;
    bool real = run > 0;
    for (size_t d = nd - 1; d-- > 0;) {  // dims nd−2 … 0 of the local index o
      const int64_t i = rest % local[d];
      rest /= local[d];
      real = real && i < range[d].second - range[d].first;
      stride *= layout.shape[d + 1];
      full_off += (range[d].first + i) * stride;
    }
    if (real) f(full_off + (nd == 0 ? 0 : range[nd - 1].first), o * last, run);
  }
}

}  // namespace

void copy_to_local(const Layout& layout, const MeshSizes& sizes, const MeshCoords& coords, const float* full,
                   float* local) {
  std::fill(local, local + local_numel(layout, sizes), 0.0f);
  for_each_block_run(layout, sizes, coords, [&](int64_t fi, int64_t li, int64_t n) {
    std::copy(full + fi, full + fi + n, local + li);
  });
}

void copy_to_full(const Layout& layout, const MeshSizes& sizes, const MeshCoords& coords, const float* local,
                  float* full) {
  for_each_block_run(layout, sizes, coords, [&](int64_t fi, int64_t li, int64_t n) {
    std::copy(local + li, local + li + n, full + fi);
  });
}

bool first_holder(const Layout& layout, const MeshCoords& coords) {
  if (layout.expert_coord >= 0) {  // the lowest holder: flattened (dp, cp) index = the ep coordinate
    const int flat = coords[static_cast<size_t>(axis_index(Axis::dp))] * layout.ep_cp_size +
                     coords[static_cast<size_t>(axis_index(Axis::cp))];
    // Sharded by ZeRO over the expert's replicas (zero_layout with replicas =
    // ep on the flattened dp, cp axis), every holder has a piece of its own.
    const bool sharded = layout.placement(Axis::dp).is_shard();
    if (sharded ? flat % layout.ep != layout.expert_coord : flat != layout.expert_coord) return false;
    const int tp = coords[static_cast<size_t>(axis_index(Axis::tp))];
    return layout.placement(Axis::tp).is_shard()
               ? tp % layout.replicas[static_cast<size_t>(axis_index(Axis::tp))] == 0
               : tp == 0;
  }
  for (Axis a : kAllAxes) {
    if (a == Axis::pp) continue;
    const int c = coords[static_cast<size_t>(axis_index(a))];
    const Placement& p = layout.placement(a);
    if (a == Axis::dp && p.is_shard() &&
        layout.dp_shard > 0) {  // HSDP: the first shard group holds each piece
      if (c >= layout.dp_shard) return false;
      continue;
    }
    if (p.is_shard() ? c % layout.replicas[static_cast<size_t>(axis_index(a))] != 0 : c != 0) return false;
  }
  return true;
}

}  // namespace mt

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

void Layout::validate() const {
  for (Axis a : kAllAxes) {
    const Placement& p = placement(a);
    MT_REQUIRE(!p.is_shard() || (p.dim() >= 0 && p.dim() < static_cast<int>(shape.size())), ConfigError,
               "layout ", to_string(), ": ", axis_name(a), " shards dim ", p.dim(), " but the tensor has ",
               shape.size(), " dims");
  }
  for (int64_t n : shape)
    MT_REQUIRE(n >= 0, ConfigError, "layout ", to_string(), ": negative size");
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
    any = true;
  }
  return any ? s : s + " R";
}

std::vector<int64_t> local_shape(const Layout& layout, const MeshSizes& sizes) {
  layout.validate();
  std::vector<int64_t> shape = layout.shape;
  for (Axis a : kRankOrder) {
    const Placement& p = layout.placement(a);
    if (p.is_shard()) {
      int64_t& n = shape[static_cast<size_t>(p.dim())];
      n = padded_shard_size(n, sizes[a]);
    }
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
  layout.validate();
  MT_CHECK(dim >= 0 && dim < static_cast<int>(layout.shape.size()), "dim ", dim);
  const int64_t n = layout.shape[static_cast<size_t>(dim)];
  int64_t begin = 0, extent = n;  // in padded coordinates
  for (Axis a : kRankOrder) {
    if (!layout.placement(a).is_shard(dim)) continue;
    extent = padded_shard_size(extent, sizes[a]);
    begin += extent * coords[axis_index(a)];
  }
  return {std::min(n, begin), std::min(n, begin + extent)};
}

}  // namespace mt

#include "model/param_slice.h"

#include "mesh/layout.h"

namespace mt {

int64_t LocalSlice::numel() const {
  int64_t n = 1;
  for (int64_t s : size)
    n *= s;
  return n;
}

LocalSlice spec_slice(const ParamSpec& spec, const MeshSizes& sizes, const MeshCoords& coords) {
  LocalSlice s;
  s.tensor = spec.name;
  s.local_shape = local_shape(spec.state_layout, sizes);
  for (int d = 0; d < static_cast<int>(spec.global_shape.size()); ++d) {
    const auto [b, e] = local_range(spec.state_layout, d, sizes, coords);
    s.offsets.push_back(b);
    s.size.push_back(e - b);
  }
  s.writer = !spec.tied_copy && first_holder(spec.state_layout, coords) && s.numel() > 0;
  return s;
}

}  // namespace mt

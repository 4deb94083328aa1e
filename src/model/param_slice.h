// The slice of one parameter that a rank holds under its state layout
// (ParamSpec::state_layout, mesh/layout.h): which box of the global tensor,
// and whether this rank writes it to a checkpoint. The checkpoint's writer
// and reader (ckpt/checkpoint_slices.h) and the memory model's count of the
// checkpoint's staging copy derive the slices here, in one way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mesh/mesh_shape.h"
#include "model/params.h"

namespace mt {

struct LocalSlice {
  std::string tensor;                  // Hugging Face name
  int64_t local_offset = 0;            // first element in the store's local buffers (params, m, v)
  std::vector<int64_t> local_shape;    // the padded piece there, row-major
  std::vector<int64_t> offsets, size;  // the box of real elements, in global coordinates
  bool writer = false;                 // the lowest rank holding this box (and not a tied copy)
  int64_t numel() const;
};

// The slice of `spec` (its state_layout set) that the rank at `coords` holds,
// without its place in the store (local_offset 0): what the memory model
// (cost/memory_model.h) counts of a checkpoint's staging copy.
LocalSlice spec_slice(const ParamSpec& spec, const MeshSizes& sizes, const MeshCoords& coords);

}  // namespace mt

// The slices of a checkpoint (ckpt/checkpoint.h): which box of which global
// tensor this rank's local buffers hold, and where. Shared by the writer and
// the reader, so that both derive the slices from the parameters' layouts
// (ParamSpec::state_layout) in one way.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mesh/mesh_shape.h"
#include "model/llama.h"
#include "model/param_slice.h"
#include "train/run_mesh.h"

namespace mt {

// This rank's slices of one model chunk, in the chunk's table order.
std::vector<LocalSlice> local_slices(Llama& chunk, const MeshSizes& sizes, const MeshCoords& coords);

// Copies the box's real elements between the padded local piece (at
// local_base + slice.local_offset) and a dense box[slice.numel()].
void slice_to_box(const LocalSlice& slice, const float* local_base, float* box);
void box_to_slice(const LocalSlice& slice, const float* box, float* local_base);

// This run's mesh sizes and this rank's coordinates on them.
MeshSizes run_sizes(const RunMesh& mesh);
MeshCoords run_coords(const RunMesh& mesh);

// "rank-00003.safetensors"
std::string slice_file_name(int rank);

}  // namespace mt

// The device mesh's sizes a configuration asks for: what the run builds its
// mesh on, and what the layout check and the memory model read without one.
#pragma once

#include "config/config.h"
#include "mesh/mesh_shape.h"

namespace mt {

// The mesh sizes parallel.{pp, dp, cp, tp} ask for.
MeshSizes mesh_sizes(const ParallelConfig& p);

}  // namespace mt

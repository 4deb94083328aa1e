// The device mesh's sizes of a configuration, for what reads the layout
// without building the mesh (the memory model, the planner, --explain).
#pragma once

#include "config/config.h"
#include "mesh/mesh_shape.h"

namespace mt {

// The mesh sizes parallel.{pp, dp, cp, tp} ask for.
MeshSizes mesh_sizes(const ParallelConfig& p);

}  // namespace mt

// --explain-memory: the memory model (train/memory_model.h) of every rank
// beside the peaks the tracked allocator measured in the run's last step.
#pragma once

#include <string>

#include "config/config.h"
#include "core/memory.h"
#include "train/run_mesh.h"

namespace mt {

// Collective over the world: every rank's peaks are gathered; rank 0 gets the
// table (train/memory_model.h memory_model_table) and a last line
// "memory model: all N rows within their bounds" or "memory model: M of N rows
// OUTSIDE their bounds"; the other ranks get "".
std::string explain_memory(const RunMesh& mesh, const Config& cfg, const MemStats& mine);

}  // namespace mt

// --explain-memory: the memory model (cost/memory_model.h) of every rank
// beside the peaks the tracked allocator measured in the run's last step.
#pragma once

#include <string>

#include "comm/group.h"
#include "config/config.h"
#include "core/memory.h"

namespace mt {

// Collective over the world: every rank's peaks are gathered; rank 0 gets the
// table (cost/memory_model.h memory_model_table) and a last line
// "memory model: all N rows within their bounds" or "memory model: M of N rows
// OUTSIDE their bounds"; the other ranks get "".
// `world`: every rank of the run (null: one process).
std::string explain_memory(Group* world, const Config& cfg, const MemStats& mine);

}  // namespace mt

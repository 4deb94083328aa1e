// A model's layers split into pipeline stages (docs/PARALLELISM.md "Pipeline
// parallelism"): what the trainer builds its chunks from and the memory model
// counts them by.
#pragma once

#include <cstdint>
#include <vector>

#include "model/params.h"

namespace mt {

// The virtual stages of `counts` layers each (pp::stage_layer_counts: an even
// split, or parallel.stage_layers; ParsedKeys::stage_layers), stage 0 with
// the embedding, the last with the head.
std::vector<StageRange> split_stages(const std::vector<int64_t>& counts);

}  // namespace mt

// How many decoder layers each virtual pipeline stage holds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mt::pp {

// Virtual stages (model chunks per rank, parallel.virtual_stages) exist only
// along a pipeline: v > 1 needs pp > 1 (ConfigError naming both otherwise).
void check_virtual_stages(int pp, int v);

// Layers of each of the pp·v virtual stages, in model order. `explicit_layers`
// is parallel.stage_layers: "" splits evenly (the first n_layers % (pp·v)
// stages take one layer more), else a comma-separated count per virtual stage
// ("3,2,2,1"), which must have pp·v entries, each ≥ 1, summing to n_layers;
// check_virtual_stages(pp, v) holds. ConfigError naming the numbers otherwise.
std::vector<int64_t> stage_layer_counts(int64_t n_layers, int pp, int v, const std::string& explicit_layers);

}  // namespace mt::pp

#include "ops/dropout.h"

#include <cmath>
#include <string>

#include "core/error.h"
#include "ops/cpu_kernels.h"

namespace mt {

DropoutKey dropout_key(uint64_t seed, int64_t step, int64_t layer, std::string_view site, double p) {
  MT_REQUIRE(p >= 0 && p < 1, ConfigError, "dropout rate (", p, ") must be in [0, 1)");
  DropoutKey k;
  if (p == 0) return k;
  k.on = true;
  k.key = philox_key(seed, "dropout/step " + std::to_string(step) + "/layer " + std::to_string(layer) + "/" +
                               std::string(site));
  k.threshold = static_cast<uint32_t>(std::min(std::round(p * 4294967296.0), 4294967295.0));
  k.scale = static_cast<float>(1.0 / (1.0 - p));
  return k;
}

void cpu::dropout_rows(float* x, int64_t rows, int64_t C, const DropoutKey& k, const TokenCoords& at) {
  if (!k.on) return;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const auto pos = static_cast<uint32_t>(at.pos[r]), seq = static_cast<uint32_t>(at.seq[r]);
    float* row = x + r * C;
    for (int64_t c = 0; c < C; ++c)
      row[c] *= dropout_factor(k, pos, static_cast<uint32_t>(c), seq, 0);
  }
}

}  // namespace mt

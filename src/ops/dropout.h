// Dropout whose every mask element is a pure function of where the element
// sits in the ONE-process computation (docs/MODEL.md, "Dropout"): the run's
// seed, the step, the layer and the site name the Philox key; the element's
// global coordinates are the Philox counter. So the same element is kept or
// dropped on any rank, shard or pipeline stage that computes it, and in a
// recomputed forward, and no mask is ever stored: the backward regenerates it.
#pragma once

#include <cstdint>
#include <string_view>

#include "core/philox.h"

namespace mt {

struct DropoutKey {
  PhiloxKey key{};
  uint32_t threshold = 0;  // an element is dropped when its 32-bit draw is below this
  float scale = 1.0f;      // 1 / (1 − p), what kept elements are multiplied by
  bool on = false;
};

// The mask of one (seed, step, layer, site) at rate p ∈ [0, 1): p = 0 gives a
// key that is off.
DropoutKey dropout_key(uint64_t seed, int64_t step, int64_t layer, std::string_view site, double p);

// The factor (0 or 1 / (1 − p)) of the element with global coordinates (a, b, c, d).
inline float dropout_factor(const DropoutKey& k, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  return philox4x32({a, b, c, d}, k.key)[0] < k.threshold ? 0.0f : k.scale;
}

// Where each row of an activation [rows, C] sits: row r is token pos[r] of the
// global sequence seq[r].
struct TokenCoords {
  const int64_t* seq;
  const int32_t* pos;
};

// x[r, c] *= factor(pos[r], c, seq[r], 0) for r < rows, c < C: dropout of a
// hidden state (forward), or of its gradient (backward, the same mask).
void dropout_rows(float* x, int64_t rows, int64_t C, const DropoutKey& k, const TokenCoords& at);

}  // namespace mt

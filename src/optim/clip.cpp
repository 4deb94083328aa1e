#include "optim/clip.h"

#include "ops/primitives.h"

namespace mt {

double clip_by_norm(float* g, int64_t n, double norm, double max_norm) {
  if (max_norm <= 0.0 || norm <= max_norm) return 1.0;
  const double factor = max_norm / (norm + 1e-6);
  scale(g, static_cast<float>(factor), n);
  return factor;
}

}  // namespace mt

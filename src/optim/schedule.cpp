#include "optim/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace mt {

double LrSchedule::at(int64_t s) const {
  if (s < warmup_steps) return lr * static_cast<double>(s + 1) / static_cast<double>(warmup_steps);
  const int64_t decay_steps = total_steps - warmup_steps - 1;
  if (decay_steps <= 0) return lr;
  const double p =
      std::clamp(static_cast<double>(s - warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(std::numbers::pi * p));
}

}  // namespace mt

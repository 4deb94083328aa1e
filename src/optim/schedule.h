// Learning-rate schedule: linear warm-up to lr over warmup_steps, then cosine
// decay to min_lr at the last step.
#pragma once

#include <cstdint>

namespace mt {

struct LrSchedule {
  double lr = 3e-4;
  double min_lr = 3e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // Rate for step s (0-based): (s+1)/warmup·lr during warm-up; then
  // min_lr + ½(lr − min_lr)(1 + cos(π·p)), p = (s − warmup)/(total − warmup − 1).
  double at(int64_t s) const;
};

}  // namespace mt

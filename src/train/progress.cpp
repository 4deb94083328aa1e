#include "train/progress.h"

#include <cstdio>

#include "comm/context.h"

namespace mt {

std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  char buf[32];
  if (s < 60) {
    std::snprintf(buf, sizeof buf, "%llds", s);
  } else if (s < 3600) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", s / 60, s % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", s / 3600, s / 60 % 60);
  }
  return buf;
}

double job_sgemm_gflops(const RunMesh& mesh, int windows, double seconds) {
  Group* world = mesh.world_size > 1 ? mesh.world() : nullptr;
  int64_t step = -1;
  if (world) {  // outside any step: the step's comm bytes stay those of the step
    step = world->context().step;
    world->context().step = -1;
    world->barrier("sgemm ceiling");
  }
  double rate = 0;
  for (int w = 0; w < windows; ++w)
    rate = std::max(rate, measure_matmul_gflops(1024, seconds, /*min_reps=*/1));
  if (world) {
    world->all_reduce(&rate, 1, "sgemm ceiling");
    world->context().step = step;
  }
  return rate;
}

void remeasure_ceiling(const RunMesh& mesh, const TrainConfig& tc, int64_t step, MfuCeiling& ceiling) {
  if (tc.steps < 100) return;
  if (step + 1 == tc.steps / 3 || step + 1 == 2 * tc.steps / 3) ceiling.measured(job_sgemm_gflops(mesh));
}

}  // namespace mt

// A job that fails on purpose, one way per mode; run_job.sh checks how it ends.
//   watchdog     (3 ranks) rank 1 sleeps 30 s before an all_reduce the others
//                wait for; rank 0 under a 2 s watchdog, rank 2 under 30 s.
//   watchdog_staged  the same on a fake-device buffer, through the host-staging
//                decorator (comm/staged_backend.h), which must pass the roll
//                call's announcements on.
//   throw        (4 ranks) rank 2 throws mt::Error at step 3; main calls abort_job.
//   startup_all  every rank reports the same validation error.
//   startup_one  only rank 1 reports one.
//   startup_none no rank does: the job runs on and exits 0.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "comm/context.h"
#include "comm/runtime.h"
#include "core/device.h"
#include "core/error.h"
#include "core/fake_device.h"

namespace {

int g_rank = -1;

void say_exit() {
  std::fprintf(stderr, "rank %d exits after startup agreement\n", g_rank);
}

void watchdog(mt::Group& world, float* buf) {
  // Ranks 0 and 2 both wait on rank 1; only rank 0's watchdog is short, so the
  // report names one rank whatever the scheduling (with equal limits either
  // rank could fire first).
  world.context().timeout_s = world.rank() == 0 ? 2 : 30;
  mt::Group dp = world.split(0, world.rank(), "dp");
  for (int64_t step = 0; step < 3; ++step) {
    world.context().step = step;
    if (step == 2 && world.rank() == 1) std::this_thread::sleep_for(std::chrono::seconds(30));
    dp.all_reduce(buf, 1024, step == 2 ? "stalled reduce" : "grads");
  }
  std::fprintf(stderr, "rank %d finished\n", world.rank());
}

void throw_at_step_3(mt::Group& world) {
  world.context().timeout_s = 120;  // the abort, not the watchdog, must end this job
  std::vector<double> buf(256, 1.0);
  for (int64_t step = 0; step < 6; ++step) {
    world.context().step = step;
    world.all_reduce(buf.data(), 256, "grads");
    if (world.rank() == 2 && step == 3) MT_THROW(Error, "boom at step 3");
  }
  std::fprintf(stderr, "rank %d finished\n", world.rank());
}

void startup(mt::Group& world, const std::string& mode) {
  g_rank = world.rank();
  std::atexit(say_exit);
  std::optional<std::string> error;
  if (mode == "startup_all") error = "n_heads (12) must be divisible by tp (8)";
  if (mode == "startup_one" && world.rank() == 1) error = "rank 1 found dp (3) × tp (2) = 6 > 4 ranks";
  mt::agree_on_startup_errors(world, error);
  std::fprintf(stderr, "rank %d passed startup\n", world.rank());
}

}  // namespace

int main(int argc, char** argv) {
  mt::CommRuntime runtime(&argc, &argv);
  mt::Group world = runtime.world();
  const std::string mode = argc > 1 ? argv[1] : "";
  try {
    if (mode == "watchdog") {
      std::vector<float> buf(1024, 1.0f);
      watchdog(world, buf.data());
    } else if (mode == "watchdog_staged") {
      mt::set_run_allocator(mt::fake_allocator());
      mt::Group staged = world.for_run_device();
      mt::DeviceBuffer buf(mt::fake_allocator(), 1024 * sizeof(float), mt::MemKind::scratch);
      watchdog(staged, static_cast<float*>(buf.data()));
    } else if (mode == "throw") {
      throw_at_step_3(world);
    } else if (mode.rfind("startup_", 0) == 0) {
      startup(world, mode);
    } else {
      MT_THROW(Error, "unknown mode '", mode, "'");
    }
  } catch (const std::exception& e) {
    mt::abort_job(world, e.what());
  }
  return 0;
}

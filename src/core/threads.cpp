#include "core/threads.h"

#include <omp.h>

#include <algorithm>
#include <thread>

#include "core/error.h"

namespace mt {

int hardware_threads() {
  return omp_get_num_procs();
}

void set_num_threads(int n) {
  MT_REQUIRE(n >= 1, ConfigError, "threads (", n, ") must be at least 1");
  omp_set_num_threads(n);
}

int num_threads() {
  return omp_get_max_threads();
}

int max_threads() {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return kThreadsPerCore * cores;
}

void check_thread_count(const char* name, int64_t n) {
  const int cores = max_threads() / kThreadsPerCore;
  MT_REQUIRE(n >= 0 && n <= max_threads(), ConfigError, name, " (", n,
             ") must be between 0 (the default: ", "the cores over the ranks on this machine) and ",
             max_threads(), " (", kThreadsPerCore, " x the ", cores,
             " cores of this machine, std::thread::hardware_concurrency())");
}

}  // namespace mt

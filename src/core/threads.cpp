#include "core/threads.h"

#include <omp.h>

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

}  // namespace mt

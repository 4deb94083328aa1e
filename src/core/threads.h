// One threading runtime: OpenMP. OpenBLAS is linked in its OpenMP build, so
// GEMMs and our kernels share the same pool of threads.
#pragma once

#include <cstdint>

namespace mt {

// Cores on this machine.
int hardware_threads();
// Sets the OpenMP pool size used by our kernels and by OpenBLAS.
void set_num_threads(int n);
int num_threads();

// The most threads one rank may ask for (train.threads, eval's and generate's
// --threads): kThreadsPerCore × the machine's cores as
// std::thread::hardware_concurrency() counts them (every core, whatever this
// process's affinity; at least 1). Past a few threads per core a run only slows
// down (20,000 threads ran 40× slower), and libgomp crashes at tens of thousands.
inline constexpr int kThreadsPerCore = 4;
int max_threads();
// ConfigError naming `name`, the value and the bound unless 0 <= n <= max_threads()
// (0: the default, this machine's cores over the ranks on it).
void check_thread_count(const char* name, int64_t n);

}  // namespace mt

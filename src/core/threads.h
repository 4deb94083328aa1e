// One threading runtime: OpenMP. OpenBLAS is linked in its OpenMP build, so
// GEMMs and our kernels share the same pool of threads.
#pragma once

namespace mt {

// Cores on this machine.
int hardware_threads();
// Sets the OpenMP pool size used by our kernels and by OpenBLAS.
void set_num_threads(int n);
int num_threads();

}  // namespace mt

#pragma once

#include <chrono>
#include <ctime>

namespace mt {

// Wall-clock seconds since construction (monotonic).
class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  void reset() { start_ = std::chrono::steady_clock::now(); }

 private:
  std::chrono::steady_clock::time_point start_;
};

// CPU seconds this process has used so far, all its threads together (OpenMP
// workers, MPI's and BLAS's threads): on a shared machine, where wall time
// depends on what else runs, the CPU a step costs is the comparable figure
// (docs/BENCHMARKS.md, "dp2 against PyTorch DDP").
inline double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace mt

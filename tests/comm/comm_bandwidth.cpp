// All-reduce bandwidth, printed only (the machines are shared; nothing is
// asserted). algbw = buffer bytes / time; busbw = algbw · 2(P-1)/P, the traffic
// each rank's link carries in a ring all-reduce (NCCL-tests' convention).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "comm/runtime.h"

int main(int argc, char** argv) {
  mt::CommRuntime runtime(&argc, &argv);
  mt::Group world = runtime.world();
  const int P = world.size();
  for (const int64_t mib : {1, 64}) {
    const int64_t n = mib * (1 << 20) / 4;
    std::vector<float> buf(n, 1.0f);
    const int iters = mib == 1 ? 50 : 5;
    world.all_reduce(buf.data(), n, "warm-up");  // first touch, connection set-up
    world.barrier("bandwidth start");
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i)
      world.all_reduce(buf.data(), n, "bandwidth");
    double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
    world.all_reduce(&seconds, 1, "slowest rank", mt::ReduceOp::max);
    const double algbw = static_cast<double>(n) * 4 / seconds / 1e9;
    if (world.rank() == 0) {
      std::printf("all_reduce f32 %3lld MiB on %d ranks: %9.3f ms/call  algbw %6.2f GB/s  busbw %6.2f GB/s\n",
                  static_cast<long long>(mib), P, seconds * 1e3, algbw, algbw * 2 * (P - 1) / P);
    }
  }
  return 0;
}

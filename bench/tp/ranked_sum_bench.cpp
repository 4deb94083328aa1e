// What the rank-ordered sum of tensor parallelism (SumOrder::ranks,
// comm/ranked_sum.h) costs against the library's own all-reduce and
// reduce-scatter, at the sizes of one layer's activation: the row-parallel
// output [N, C] whole, and one of 4 overlap chunks of it (`make bench-tp`;
// docs/BENCHMARKS.md "Tensor parallel"). The two orders alternate call by call,
// so that load from other processes falls on both; the median of each is
// printed, as the slowest rank's time.
//
//   mpirun -np P meshtrain_ranked_sum_bench [--tokens N] [--width C] [--iters K]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "comm/runtime.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One call of the collective `op` ("all_reduce" or "reduce_scatter") over n
// floats of buf (rs: P·n in buf, n out), in order `order`; seconds of the
// slowest rank.
double timed(mt::Group& g, bool reduce_scatter, mt::SumOrder order, std::vector<float>& buf,
             std::vector<float>& out, int64_t n) {
  g.barrier("bench start");
  const auto t0 = Clock::now();
  if (reduce_scatter) {
    g.reduce_scatter(buf.data(), out.data(), n / g.size(), mt::ElemType::f32, order, "bench rs");
  } else {
    g.all_reduce(buf.data(), n, mt::ElemType::f32, order, "bench ar");
  }
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  g.all_reduce(&s, 1, "slowest rank", mt::ReduceOp::max);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  mt::CommRuntime runtime(&argc, &argv);
  mt::Group world = runtime.world();
  int64_t tokens = 2048, width = 512;
  int iters = 20;
  CLI::App app{"rank-ordered sum against the library's all-reduce and reduce-scatter"};
  app.add_option("--tokens", tokens, "rows N of the activation (B x T)");
  app.add_option("--width", width, "its width C (d_model)");
  app.add_option("--iters", iters, "calls per case and order");
  CLI11_PARSE(app, argc, argv);
  const int P = world.size();
  if (world.rank() == 0)
    std::printf("%-15s %-14s %10s %12s %12s %8s\n", "collective", "shape", "MiB", "library ms", "ranks ms",
                "ratio");
  for (const bool rs : {false, true}) {
    for (const int64_t rows : {tokens, tokens / 4}) {
      const int64_t n = rows / P * P * width;
      std::vector<float> buf(static_cast<size_t>(n), 1.0f), out(static_cast<size_t>(n / P));
      std::vector<double> lib, ranked;
      for (int i = 0; i < iters + 1; ++i) {  // the first call of each warms up
        const double a = timed(world, rs, mt::SumOrder::library, buf, out, n);
        const double b = timed(world, rs, mt::SumOrder::ranks, buf, out, n);
        if (i > 0) {
          lib.push_back(a);
          ranked.push_back(b);
        }
      }
      if (world.rank() == 0) {
        char shape[32];
        std::snprintf(shape, sizeof shape, "[%lld, %lld]", static_cast<long long>(n / width),
                      static_cast<long long>(width));
        std::printf("%-15s %-14s %10.2f %12.3f %12.3f %8.2f\n", rs ? "reduce_scatter" : "all_reduce", shape,
                    static_cast<double>(n) * 4 / (1 << 20), median(lib) * 1e3, median(ranked) * 1e3,
                    median(ranked) / median(lib));
      }
    }
  }
  return 0;
}

#include "report.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace mt::bench {

double BenchResult::median_step_s() const {
  MT_REQUIRE(!step_seconds.empty(), Error, "no timed steps");
  std::vector<double> s = step_seconds;
  std::sort(s.begin(), s.end());
  const size_t n = s.size();
  return n % 2 == 1 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
}

double BenchResult::min_step_s() const {
  MT_REQUIRE(!step_seconds.empty(), Error, "no timed steps");
  return *std::min_element(step_seconds.begin(), step_seconds.end());
}

double BenchResult::sgemm_1024() const {
  return std::max(gemm_before.at(0).gflops, gemm_after.empty() ? 0.0 : gemm_after.at(0).gflops);
}

double BenchResult::sgemm_max() const {
  double best = 0;
  for (const GemmRate& g : max_rates(gemm_before, gemm_after))
    best = std::max(best, g.gflops);
  return best;
}

namespace {

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1 << 20);
}

}  // namespace

void print_table(const BenchResult& r) {
  std::printf("meshtrain_bench: %s, %lld x %lld tokens (microbatch %lld), %d threads\n",
              r.config_path.c_str(), static_cast<long long>(r.batch), static_cast<long long>(r.seq_len),
              static_cast<long long>(r.microbatch), r.threads);
  std::printf("  matrix products          %s: %s\n", r.precision.c_str(), r.matmul.c_str());
  std::printf("  parameters               %lld (%lld in matrix products)\n",
              static_cast<long long>(r.num_params), static_cast<long long>(r.matmul_params));
  std::printf("  FLOPs per step           %.1f GFLOP (%.1f MFLOP/token)\n", r.flops_per_step() / 1e9,
              r.flops_per_token / 1e6);
  std::printf("  step time (median of %zu) %.3f s   [", r.step_seconds.size(), r.median_step_s());
  for (double s : r.step_seconds)
    std::printf(" %.3f", s);
  std::printf(" ]\n");
  std::printf("  tokens/s                 %.0f\n", r.tokens_per_s());
  std::printf("  achieved                 %.1f GFLOP/s\n", r.achieved_gflops());
  std::printf("  GEMM rate at the run's precision, %s (before / after, GFLOP/s):\n", r.ceiling_name.c_str());
  for (size_t i = 0; i < r.gemm_before.size(); ++i) {
    std::printf("    %-26s %7.1f / %7.1f\n", r.gemm_before[i].shape.c_str(), r.gemm_before[i].gflops,
                i < r.gemm_after.size() ? r.gemm_after[i].gflops : 0.0);
  }
  std::printf("  MFU vs GEMM 1024^3       %.3f  (ceiling %.1f GFLOP/s)\n",
              r.achieved_gflops() / r.sgemm_1024(), r.sgemm_1024());
  std::printf("  MFU vs best GEMM         %.3f  (ceiling %.1f GFLOP/s)\n",
              r.achieved_gflops() / r.sgemm_max(), r.sgemm_max());
  std::printf("  peak memory              %.1f MiB:", mib(r.mem_peak_total));
  for (int k = 0; k < kNumMemKinds; ++k) {
    if (r.mem_peak[static_cast<size_t>(k)] == 0) continue;
    std::printf(" %.*s %.1f", static_cast<int>(mem_kind_name(static_cast<MemKind>(k)).size()),
                mem_kind_name(static_cast<MemKind>(k)).data(), mib(r.mem_peak[static_cast<size_t>(k)]));
  }
  std::printf("\n");
  if (r.profiled_steps > 0) {
    std::printf("  share of step time (profiled pass, %lld steps, %.3f s/step):\n",
                static_cast<long long>(r.profiled_steps),
                r.profiled_seconds / static_cast<double>(r.profiled_steps));
    for (const auto& [name, s] : r.kernel_seconds) {
      std::printf("    %-14s %5.1f%%  %.3f s/step\n", name.c_str(), 100.0 * s / r.profiled_seconds,
                  s / static_cast<double>(r.profiled_steps));
    }
  }
  std::printf("  loss per step           ");
  for (double l : r.losses)
    std::printf(" %.4f", l);
  std::printf("\n");
  std::fflush(stdout);
}

void write_json(const BenchResult& r, const std::string& path) {
  auto rates = [](const std::vector<GemmRate>& v) {
    nlohmann::json j = nlohmann::json::object();
    for (const GemmRate& g : v)
      j[g.shape] = g.gflops;
    return j;
  };
  nlohmann::json mem = nlohmann::json::object();
  for (int k = 0; k < kNumMemKinds; ++k)
    mem[std::string(mem_kind_name(static_cast<MemKind>(k)))] = r.mem_peak[static_cast<size_t>(k)];
  mem["total"] = r.mem_peak_total;
  nlohmann::json shares = nlohmann::json::object();
  for (const auto& [name, s] : r.kernel_seconds)
    shares[name] = r.profiled_seconds > 0 ? s / r.profiled_seconds : 0.0;
  const nlohmann::json j = {
      {"impl", "meshtrain"},
      {"config", r.config_path},
      {"precision", r.precision},
      {"matmul", r.matmul},
      {"threads", r.threads},
      {"batch", r.batch},
      {"seq_len", r.seq_len},
      {"num_params", r.num_params},
      {"matmul_params", r.matmul_params},
      {"flops_per_token", r.flops_per_token},
      {"flops_per_step", r.flops_per_step()},
      {"step_seconds", r.step_seconds},
      {"median_step_s", r.median_step_s()},
      {"min_step_s", r.min_step_s()},
      {"tokens_per_s", r.tokens_per_s()},
      {"achieved_gflops", r.achieved_gflops()},
      {"sgemm_before", rates(r.gemm_before)},
      {"sgemm_after", rates(r.gemm_after)},
      {"ceiling", r.ceiling_name},
      {"sgemm_1024_gflops", r.sgemm_1024()},
      {"sgemm_max_gflops", r.sgemm_max()},
      {"mfu_1024", r.achieved_gflops() / r.sgemm_1024()},
      {"mfu_max", r.achieved_gflops() / r.sgemm_max()},
      {"mem_peak_bytes", mem},
      {"kernel_shares", shares},
      {"profiled_step_s",
       r.profiled_steps > 0 ? r.profiled_seconds / static_cast<double>(r.profiled_steps) : 0.0},
      {"losses", r.losses}};
  std::ofstream out(path, std::ios::out | std::ios::trunc);
  MT_REQUIRE(out.good(), IoError, "cannot open '", path, "' for writing");
  out << j.dump(2) << "\n";
  MT_REQUIRE(out.good(), IoError, "cannot write '", path, "'");
}

}  // namespace mt::bench

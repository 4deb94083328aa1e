// The time model on a calibrated (shared-compute) machine, from a hand-written
// machine file: the rates measured for the number of ranks a layout puts on
// the node are the ones used, and one tiny layout's step time is the sum of
// its parts computed by hand (docs/PLANNER.md, "Time model").
#include <gtest/gtest.h>

#include "cost/memory_estimate.h"
#include "plan/cost.h"
#include "plan/kernels.h"
#include "plan/machine.h"

namespace mt::plan {
namespace {

// One rank alone (2 threads): GEMMs at 1 GFLOP/s, its layer kernels; two
// ranks at once (1 thread each): the node's 3 GFLOP/s, 1.5 per rank.
constexpr const char* kMachine = R"({
  "name": "hand", "devices_per_node": 1048576, "peak_flops": 3e9, "shared_compute": true,
  "memory_bytes": 1e10, "memory_bytes_per_s": 1e10, "precision": "fp32", "overlap": 0,
  "intra": {"alpha_s": 1e-6, "bytes_per_s": 1e9}, "inter": {"alpha_s": 1e-6, "bytes_per_s": 1e9},
  "gemm": [{"m": 32, "n": 64, "k": 64, "flops_per_s": 1e9, "ranks": 1, "threads": 2},
           {"m": 32, "n": 64, "k": 64, "flops_per_s": 3e9, "ranks": 2, "threads": 1}],
  "kernels": [{"batch": 2, "seq_len": 16, "d_model": 64, "ffn_hidden": 128, "heads": 2, "attention_s": 1e-3,
               "attention_half_s": 3e-4, "elementwise_s": 2e-4, "optimizer_s": 1e-9, "ranks": 1, "threads": 2},
              {"batch": 2, "seq_len": 16, "d_model": 64, "ffn_hidden": 128, "heads": 2, "attention_s": 4e-4,
               "attention_half_s": 1e-4, "elementwise_s": 1e-4, "optimizer_s": 2e-9, "ranks": 2, "threads": 1}]
})";

PlanInput tiny(int64_t devices, int64_t global_batch) {
  PlanInput in;
  in.model.vocab_size = 64;
  in.model.d_model = 64;
  in.model.n_layers = 1;
  in.model.n_heads = 2;
  in.model.n_kv_heads = 2;
  in.model.ffn_hidden = 128;
  in.model.max_seq_len = 16;
  in.devices = devices;
  in.global_batch = global_batch;
  in.seq_len = 16;
  return in;
}

// Forward + backward GEMM FLOPs of one microbatch of 2 × 16 tokens: 6 · 32 ·
// (q/k/v 192·64 + o 64·64 + gate/up 256·64 + down 64·128 + head 64·64).
constexpr double kGemmFlops = 6.0 * 32 * (192 * 64 + 64 * 64 + 256 * 64 + 64 * 128 + 64 * 64);

TEST(PlanCalibrated, RatesFollowTheRanksOnTheNode) {
  const Machine m = machine_from_json(kMachine, "test");
  EXPECT_EQ(m.measured_ranks(1), 1);
  EXPECT_EQ(m.measured_ranks(2), 2);
  EXPECT_EQ(m.measured_ranks(4), 2);  // 4 ranks on the node: the 2-rank node rate, shared 4 ways
  EXPECT_DOUBLE_EQ(m.gemm_rate(32, 64, 64, 1), 1e9);
  EXPECT_DOUBLE_EQ(m.gemm_rate(32, 64, 64, 2), 1.5e9);
  EXPECT_DOUBLE_EQ(m.gemm_rate(32, 64, 64, 4), 0.75e9);
  EXPECT_DOUBLE_EQ(m.layer_kernels(1)->attention_s, 1e-3);
  EXPECT_DOUBLE_EQ(m.layer_kernels(3)->attention_s, 4e-4);
  // Round trip through the file format keeps the ranks and threads.
  const Machine back = machine_from_json(machine_to_json(m), "round trip");
  ASSERT_EQ(back.gemm.size(), 2u);
  EXPECT_EQ(back.gemm[0].threads, 2);
  EXPECT_EQ(back.kernels[1].ranks, 2);
  EXPECT_DOUBLE_EQ(back.kernels[0].attention_half_s, 3e-4);
}

TEST(PlanCalibrated, OlderFilesMeanAnyNumberOfRanks) {
  // Before rates by ranks: the node's rate for any number of ranks, one kernels object.
  const Machine m = machine_from_json(R"({
    "name": "old", "devices_per_node": 1048576, "peak_flops": 2e9, "shared_compute": true,
    "memory_bytes": 1e10, "memory_bytes_per_s": 1e10, "precision": "fp32",
    "intra": {"alpha_s": 1e-6, "bytes_per_s": 1e9}, "inter": {"alpha_s": 1e-6, "bytes_per_s": 1e9},
    "gemm": [{"m": 32, "n": 64, "k": 64, "flops_per_s": 2e9}],
    "kernels": {"batch": 2, "seq_len": 16, "d_model": 64, "ffn_hidden": 128, "heads": 2,
                "attention_s": 1e-3, "elementwise_s": 2e-4}})",
                                      "old");
  EXPECT_EQ(m.measured_ranks(2), 0);
  EXPECT_DOUBLE_EQ(m.gemm_rate(32, 64, 64, 2), 1e9);
  ASSERT_NE(m.layer_kernels(2), nullptr);
  EXPECT_DOUBLE_EQ(m.layer_kernels(2)->optimizer_s, 0.0);  // not measured: AdamW's traffic at the memory rate
}

TEST(PlanCalibrated, OneRankStepByHand) {
  const Machine m = machine_from_json(kMachine, "test");
  const PlanInput in = tiny(1, 2);
  // embedding 64·64, q/k/v 192·64, o 64·64, MLP 3·64·128, two norms, final norm, head 64·64
  const double params = 4096 + 12288 + 4096 + 24576 + 128 + 64 + 4096;
  ASSERT_EQ(checked_param_count(in.model), int64_t(params));
  PlanLayout l;
  l.mbs = 2;  // one microbatch of the whole batch
  const Prediction p = predict(in, l, m);
  EXPECT_EQ(p.microbatches, 1);
  // GEMMs at the one-rank rate; the measured attention and element-wise work
  // at the measured shape (scale 1); the optimizer pass per parameter.
  EXPECT_NEAR(p.compute_s, kGemmFlops / 1e9 + 1e-3, 1e-12);
  EXPECT_NEAR(p.elementwise_s, 2e-4, 1e-12);
  EXPECT_NEAR(p.optimizer_s, params * 1e-9, 1e-15);
  EXPECT_NEAR(p.step_s, kGemmFlops / 1e9 + 1e-3 + 2e-4 + params * 1e-9, 1e-12);
}

TEST(PlanCalibrated, TwoRanksUseTheirOwnRates) {
  const Machine m = machine_from_json(kMachine, "test");
  PlanLayout dp;
  dp.dp = 2, dp.mbs = 2;
  const Prediction p = predict(tiny(2, 4), dp, m);
  // Each rank: the node's 2-rank rate halved, and the 2-rank kernels' node
  // seconds × 2 ranks.
  EXPECT_NEAR(p.compute_s, kGemmFlops / 1.5e9 + 2 * 4e-4, 1e-12);
  EXPECT_NEAR(p.optimizer_s, double(checked_param_count(tiny(2, 4).model)) * 2e-9 * 2, 1e-12);
  // cp 2: the ring's two blocks of 8 × 8 tokens, each the measured half-length
  // attention (8 = 16 / 2: scale 1), instead of half the full attention.
  PlanLayout cp;
  cp.cp = 2, cp.mbs = 2;
  const Prediction q = predict(tiny(2, 2), cp, m);
  const double gemm_cp = kGemmFlops / 2 / m.gemm_rate(16, 64, 64, 2);
  EXPECT_NEAR(q.compute_s, gemm_cp + 2 * 1e-4 * 2, 1e-12);
  // cp 2 Ulysses: the whole sequence for half the heads at once, the measured
  // full-length attention (node seconds 6e-4 here, × 2 ranks) × 1/2, not the
  // ring's blocks.
  Machine u = m;
  u.kernels[1].attention_s = 6e-4;
  cp.cp_impl = cp::CpImpl::ulysses;
  EXPECT_NEAR(predict(tiny(2, 2), cp, u).compute_s, gemm_cp + 6e-4 * 2 / 2, 1e-12);
}

TEST(PlanCalibrated, LayerGemmsAreTheModelsShapes) {
  ModelConfig md = tiny(1, 1).model;
  md.n_layers = 2;
  int calls = 0;
  const std::vector<GemmRate> r = measure_layer_gemms(md, 32, 2, [&](const std::function<void()>& fn) {
    fn();
    ++calls;
    return 1.0;
  });
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(calls, 1);
  // C[rows, outputs] from inputs, tp 2: q/k/v and gate/up split by output, o and down by input.
  const int64_t expect[5][3] = {{32, 96, 64}, {32, 64, 32}, {32, 128, 64}, {32, 64, 64}, {32, 32, 64}};
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].m, expect[i][0]);
    EXPECT_EQ(r[i].n, expect[i][1]);
    EXPECT_EQ(r[i].k, expect[i][2]);
    EXPECT_GT(r[i].flops_per_s, 0);
  }
}

}  // namespace
}  // namespace mt::plan

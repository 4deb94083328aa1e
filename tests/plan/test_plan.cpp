// The planner's pieces against hand-derived values: the α-β fit, ring
// collective costs, the pipeline bubble, the paper's FLOP formula, layout
// parsing and its errors, HSDP's memory.
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "plan/calibrate.h"
#include "plan/cost.h"
#include "plan/memory.h"
#include "plan/search.h"

namespace mt::plan {
namespace {

PlanInput small_input(int64_t devices) {
  PlanInput in;
  in.model.vocab_size = 1024;
  in.model.d_model = 256;
  in.model.n_layers = 4;
  in.model.n_heads = 8;
  in.model.n_kv_heads = 8;
  in.model.ffn_hidden = 512;
  in.model.max_seq_len = 256;
  in.devices = devices;
  in.global_batch = 16;
  in.seq_len = 256;
  return in;
}

TEST(Plan, FitRecoversAlphaAndBeta) {
  const double alpha = 3e-6, beta = 2e9;
  std::vector<double> x{1e3, 1e5, 1e6, 1e7}, y;
  for (double b : x)
    y.push_back(alpha + b / beta);
  const AlphaBeta f = fit_alpha_beta(x, y);
  EXPECT_NEAR(f.alpha_s, alpha, 1e-9);
  EXPECT_NEAR(f.bytes_per_s / beta, 1.0, 1e-9);
}

TEST(Plan, RingCollectivesByHand) {
  const Machine m = load_machine("h100-8x-ib");
  // all-reduce of 1 GB over 8 GPUs of a node: 2·7 steps of 5 µs and 2·7/8 GB at
  // 80% of NVLink 4's 450 GB/s (docs/PLANNER.md, "Built-in profiles").
  EXPECT_NEAR(collective_time(m, "all_reduce", 8, 1e9, false), 14 * 5e-6 + 1.75e9 / 360e9, 1e-12);
  // all-gather over 16 ranks crossing nodes: 15 steps of 10 µs, 15/16 GB at 80% of 50 GB/s.
  EXPECT_NEAR(collective_time(m, "all_gather", 16, 1e9, true), 15 * 10e-6 + 0.9375e9 / 40e9, 1e-12);
  EXPECT_EQ(collective_time(m, "all_reduce", 1, 1e9, false), 0.0);
}

TEST(Plan, PaperFlopFormula) {
  ModelConfig m;  // the 145.6B row: 96·B·s·l·h²·(1 + s/6h + V/16lh) evaluated by hand
  m.vocab_size = 51200, m.d_model = 12288, m.n_layers = 80;
  const double expect = 96.0 * 2304 * 2048 * 80 * 12288.0 * 12288.0 *
                        (1 + 2048.0 / (6 * 12288.0) + 51200.0 / (16 * 80 * 12288.0));
  EXPECT_NEAR(narayanan_flops(m, 2304, 2048) / expect, 1.0, 1e-12);
}

TEST(Plan, BubbleIsTheScheduleFormula) {
  const PlanInput in = small_input(4);
  PlanLayout l;
  l.dp = 1, l.pp = 4, l.mbs = 2, l.v = 1;
  const Prediction p = predict(in, l, load_machine("a100-8x-ib"));
  EXPECT_EQ(p.microbatches, 8);
  EXPECT_NEAR(p.bubble_fraction, 3.0 / (8 + 3), 1e-12);  // (p−1)/(m·v+p−1), no pp-exposed time in it
}

// zbh1: the fraction (p−1)/(3m+p−1), and the bubble's seconds (p−1)·(F + B − W)
// with B = W = backward / 2 below 1f1b's (p−1)·(F + B + W); the search
// chooses it over the same layout with 1f1b, where the trainer runs it.
TEST(Plan, ZeroBubbleTermAndChoice) {
  const PlanInput in = small_input(4);
  const Machine m = load_machine("a100-8x-ib");
  PlanLayout l;
  l.dp = 1, l.pp = 4, l.mbs = 2, l.v = 1;
  const Prediction one = predict(in, l, m);
  l.zb = true;
  const Prediction zb = predict(in, l, m);
  EXPECT_NEAR(zb.bubble_fraction, 3.0 / (3 * 8 + 3), 1e-12);
  EXPECT_LT(zb.bubble_s, one.bubble_s);  // by (p−1)·backward; the exposed comm stays in both
  EXPECT_LT(zb.step_s, one.step_s);
  EXPECT_EQ(to_string(l), "dp1,tp1,pp4,cp1,ep1,zero0,mbs2,v1,recompute=none,zbh1");
  EXPECT_TRUE(parse_layout("pp4,zbh1").layout.zb);
  LayoutSpec fixed = parse_layout("dp1,tp1,pp4,cp1,zero0,mbs2,v1,recompute=none");
  const PlanResult r = search(in, m, fixed);
  ASSERT_FALSE(r.ranked.empty());
  EXPECT_TRUE(r.ranked.front().layout.zb) << to_string(r.ranked.front().layout);
  fixed = parse_layout("dp1,tp2,pp2,cp1,zero0,mbs2,v1,recompute=none");  // tp 2: zbh1 does not run there
  for (const Prediction& p : search(in, m, fixed).ranked)
    EXPECT_FALSE(p.layout.zb);
}

TEST(Plan, LayoutRoundTripAndErrors) {
  const LayoutSpec s = parse_layout("dp4,tp2,pp2,cp1,ep1,zero3,mbs2,v2,sp,recompute=selective,shard2");
  EXPECT_TRUE(s.complete());
  EXPECT_EQ(to_string(s.layout), "dp4,tp2,pp2,cp1,ep1,zero3,mbs2,v2,sp,recompute=selective,shard2");
  EXPECT_THROW(parse_layout("dp2,xx3"), ConfigError);
  EXPECT_THROW(parse_layout("dp0"), ConfigError);
  EXPECT_THROW(parse_layout("recompute=some"), ConfigError);
  PlanInput in = small_input(8);
  PlanLayout l;
  l.dp = 3;  // 3 ≠ 8 devices
  EXPECT_THROW(check_layout(in, l), ConfigError);
  l.dp = 8, l.mbs = 4;  // 16 sequences do not split into 8 × 4
  EXPECT_THROW(check_layout(in, l), ConfigError);
  EXPECT_THROW(load_machine("no-such-machine"), ConfigError);
}

TEST(Plan, HsdpShardsStateOverTheShardGroup) {
  const PlanInput in = small_input(8);
  const Machine m = load_machine("a100-8x-ib");
  PlanLayout full, hsdp;
  full.dp = hsdp.dp = 8;
  full.zero = hsdp.zero = 1;
  full.mbs = hsdp.mbs = 2;
  hsdp.shard = 2;
  const auto state = [](const MemoryEstimate& e) {
    for (const auto& [name, b] : e.parts)
      if (name.find("state") != std::string::npos) return b;
    return int64_t{-1};
  };
  const int64_t a = state(plan_memory(in, full, m)), b = state(plan_memory(in, hsdp, m));
  EXPECT_GT(a, 0);
  EXPECT_NEAR(double(b) / double(a), 4.0, 0.01);  // sharded over 2 ranks instead of 8
}

TEST(Plan, SearchRanksFastestFirstAndExplains) {
  const PlanInput in = small_input(8);
  const Machine m = load_machine("h100-8x-ib");
  const PlanResult r = search(in, m, parse_layout(""));
  ASSERT_GE(r.ranked.size(), 2u);
  for (size_t i = 1; i < r.ranked.size(); ++i)
    EXPECT_LE(r.ranked[i - 1].step_s, r.ranked[i].step_s);
  EXPECT_NE(why_slower(r.ranked[1], r.ranked[0]).find("ms"), std::string::npos);
  EXPECT_LE(r.ranked[0].mfu, 1.0);
}

}  // namespace
}  // namespace mt::plan

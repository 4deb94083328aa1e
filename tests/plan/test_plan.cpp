// The planner's pieces against hand-derived values: the α-β fit, ring
// collective costs, the pipeline bubble, the paper's FLOP formula, layout
// parsing and its errors, HSDP's memory, cp's attention (ring, Ulysses, the
// hybrid): its bytes and the choice between them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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

TEST(Plan, CpAttentionTokensRoundTrip) {
  LayoutSpec s = parse_layout("dp2,tp1,pp1,cp4,hybrid2,zero0,mbs1");
  EXPECT_TRUE(s.has_cp_impl);
  EXPECT_EQ(s.layout.cp_impl, cp::CpImpl::hybrid);
  EXPECT_EQ(s.layout.cp_a2a, 2);
  EXPECT_EQ(to_string(s.layout), "dp2,tp1,pp1,cp4,hybrid2,ep1,zero0,mbs1,v1,recompute=none");
  EXPECT_EQ(to_string(parse_layout(to_string(s.layout)).layout), to_string(s.layout));
  s = parse_layout("cp8,ulysses");
  EXPECT_EQ(s.layout.cp_impl, cp::CpImpl::ulysses);
  EXPECT_EQ(to_string(s.layout), "dp1,tp1,pp1,cp8,ulysses,ep1,zero0,mbs1,v1,recompute=none");
  s = parse_layout("cp2,ring");
  EXPECT_TRUE(s.has_cp_impl);
  EXPECT_EQ(to_string(s.layout), "dp1,tp1,pp1,cp2,ring,ep1,zero0,mbs1,v1,recompute=none");
  EXPECT_EQ(to_string(parse_layout("cp1").layout), "dp1,tp1,pp1,cp1,ep1,zero0,mbs1,v1,recompute=none");
  for (const char* bad : {"cp4,ulyses", "cp4,hybrid", "cp4,hybridx2"}) {
    try {
      parse_layout(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("ring, ulysses, hybridN"), std::string::npos) << e.what();
    }
  }
}

// Ulysses's and the hybrid's cp bytes and times per step, counted by hand
// from the ledger (parallel/cp_ulysses.h): 8 heads, 2 kv heads, D = 32, tp 2
// (H_l = 4, KV_l = 1), mbs 2 of 256 tokens, 8 microbatches, 4 layers, bf16
// (2 B), all in one node of the h100 profile (α 5 µs, β 360 GB/s).
TEST(Plan, UlyssesBytesAreTheLedger) {
  PlanInput in = small_input(8);
  in.model.n_kv_heads = 2;
  const Machine m = load_machine("h100-8x-ib");
  PlanLayout l;
  l.tp = 2, l.cp = 4, l.mbs = 2, l.cp_impl = cp::CpImpl::ulysses;
  const double steps = 8 * 4;  // microbatches × layers
  {
    // U = 4, n = 2·256/4 = 128 tokens, Hu = 1, KVu = 1 (the one kv head,
    // replicated), row = 3·32 = 96; widths 97, 32 + 1, 96 + 64 + 1 + 1, 96.
    const Prediction p = predict(in, l, m);
    ASSERT_EQ(p.microbatches, 8);
    std::vector<const AxisComm*> cp;
    for (const AxisComm& a : p.comm)
      if (a.axis == "cp") cp.push_back(&a);
    ASSERT_EQ(cp.size(), 1u);
    EXPECT_DOUBLE_EQ(cp[0]->bytes, steps * 4 * 128 * (97 + 33 + 162 + 96) * 2);
    double s = 0;
    for (double w : {97, 33, 162, 96})
      s += 3 * 5e-6 + 0.75 * (4 * 128 * w * 2) / 360e9;  // (U−1)·α + (U−1)/U of the buffer / β
    EXPECT_NEAR(cp[0]->total_s, steps * s, 1e-15);
    EXPECT_EQ(cp[0]->hidden_s, 0.0);  // blocking
    EXPECT_NE(cp[0]->what.find("all-to-alls of q, k, v, out"), std::string::npos) << cp[0]->what;
  }
  {
    // hybrid2: U = 2 (Hu = 2, KVu = 1, row = 4·32 = 128; widths 129, 64 + 2,
    // 128 + 128 + 2 + 1, 128) and a ring of R = 2 over the group's 256 tokens:
    // one hop per layer of [k|v|pos] (256·65) forward and backward, one of
    // [dk|dv] (256·64) backward.
    l.cp_impl = cp::CpImpl::hybrid, l.cp_a2a = 2;
    const Prediction p = predict(in, l, m);
    std::vector<const AxisComm*> cp;
    for (const AxisComm& a : p.comm)
      if (a.axis == "cp") cp.push_back(&a);
    ASSERT_EQ(cp.size(), 2u);
    EXPECT_DOUBLE_EQ(cp[0]->bytes, steps * 2 * 128 * (129 + 66 + 259 + 128) * 2);
    double s = 0;
    for (double w : {129, 66, 259, 128})
      s += 5e-6 + 0.5 * (2 * 128 * w * 2) / 360e9;
    EXPECT_NEAR(cp[0]->total_s, steps * s, 1e-15);
    EXPECT_DOUBLE_EQ(cp[1]->bytes, steps * (2 * 256 * 65 + 256 * 64) * 2);
    EXPECT_NEAR(cp[1]->total_s, steps * (2 * (5e-6 + 256 * 65 * 2 / 360e9) + 5e-6 + 256 * 64 * 2 / 360e9),
                1e-15);
    EXPECT_NE(cp[1]->what.find("ring passes across the all-to-all groups"), std::string::npos) << cp[1]->what;
  }
}

// Two-rank nodes with one shared link between them (an emulated cluster):
// cp 4 Ulysses puts g = 2 ranks of its all-to-all on a node, so half of each
// rank's buffer crosses, and both ranks of the node send across at once, each
// at half the link; the plain ring's one crossing edge per direction has the
// link to itself, and the hybrid's ring of two crosses with both ranks' flows.
TEST(Plan, SharedLinkDividesTheFlowsThatCrossAtOnce) {
  PlanInput in = small_input(4);
  in.model.n_kv_heads = 4;  // 8 heads of 32: at U = 4 Hu = 2, KVu = 1 (row 128); at U = 2 Hu = 4, KVu = 2
  Machine m;
  m.name = "two-nodes";
  m.devices_per_node = 2;
  m.peak_flops = 1e12;
  m.memory_bytes = 1e15;
  m.intra = AlphaBeta{0, 1e12};
  m.inter = AlphaBeta{0, 1e8};
  m.shared_link = true;
  PlanLayout l;
  l.cp = 4, l.mbs = 2, l.cp_impl = cp::CpImpl::ulysses;
  const double steps = 8 * 4;  // microbatches (16 sequences, 2 a microbatch) × layers
  auto cp_rows = [&](const PlanLayout& x) {
    std::vector<AxisComm> out;
    for (const AxisComm& a : predict(in, x, m).comm)
      if (a.axis == "cp") out.push_back(a);
    return out;
  };
  const double n = 2 * 256 / 4;  // tokens a rank
  {
    const std::vector<AxisComm> cp = cp_rows(l);
    ASSERT_EQ(cp.size(), 1u);
    double s = 0;
    for (double w : {129, 66, 259, 128})  // half crosses, at 1e8 / 2
      s += 0.5 * (4 * n * w * 2) / (1e8 / 2);
    EXPECT_NEAR(cp[0].total_s, steps * s, 1e-12);
  }
  {
    l.cp_impl = cp::CpImpl::ring;
    const std::vector<AxisComm> cp = cp_rows(l);
    ASSERT_EQ(cp.size(), 1u);
    const double block = n * (2 * 4 * 32 + 1) * 2, grads = n * 2 * 4 * 32 * 2;  // 3 hops, the whole link
    EXPECT_NEAR(cp[0].total_s, steps * 3 * (2 * block + grads) / 1e8, 1e-12);
  }
  {
    l.cp_impl = cp::CpImpl::hybrid, l.cp_a2a = 2;  // pairs inside a node, a ring of two across
    const std::vector<AxisComm> cp = cp_rows(l);
    ASSERT_EQ(cp.size(), 2u);
    EXPECT_FALSE(cp[0].crosses_nodes);
    const double block = 2 * n * (2 * 2 * 32 + 1) * 2, grads = 2 * n * 2 * 2 * 32 * 2;  // two flows share it
    EXPECT_NEAR(cp[1].total_s, steps * (2 * block + grads) / (1e8 / 2), 1e-12);
  }
}

// A machine of one 8-device node whose numbers make the choice follow from
// the formulas: every candidate below has the same tokens per rank, so all
// but the attention's compute and cp's messages are the same.
Machine cp_machine(double peak, double memory_rate, double overlap) {
  Machine m;
  m.name = "cp-test";
  m.devices_per_node = 8;
  m.peak_flops = peak;
  m.gemm_efficiency = 1;
  m.memory_bytes = 1e15;  // everything fits
  m.memory_bytes_per_s = memory_rate;
  m.intra = m.inter = AlphaBeta{1e-6, 1e10};
  m.overlap = overlap;
  return m;
}

PlanInput long_input(int64_t kv_heads, int64_t seq_len) {
  PlanInput in = small_input(8);
  in.model.d_model = 1024, in.model.n_heads = 16, in.model.n_kv_heads = kv_heads;  // D = 64
  in.model.ffn_hidden = 2048, in.model.n_layers = 2;
  in.model.max_seq_len = in.seq_len = seq_len;
  in.global_batch = 1;
  return in;
}

// The search's attentions at cp 8, everything else fixed.
const LayoutSpec kCp8 = parse_layout("dp1,tp1,pp1,cp8,ep1,zero0,mbs1,v1,nosp,recompute=none,nozb");

std::vector<std::string> names(const PlanResult& r) {
  std::vector<std::string> out;
  for (const Prediction& p : r.ranked)
    out.push_back(cp_attention_name(p.layout));
  return out;
}

// MHA, 16 heads, cp 8, nothing hidden (overlap 0). Bytes leaving a rank per
// layer, in units of n·2 B (n = T/8 tokens, H = 16, D = 64, so H·D = 1024):
// ring 7·(3·2·H·D + 2) = 43022; Ulysses (Hu = KVu = 2) 7/8·8·(3·6·D + 3·2·D
// + 2·2 + 2) = 10794; hybrid4 3·(3·12·D + 3·4·D + 10) + 4·(6·4·D + 2) =
// 15398; hybrid2 1·(3·24·D + 3·8·D + 18) + 3·2·(6·8·D + 2) = 24606. At
// 1e10 B/s and n = 512 that is ≥ 0.47 ms per layer in Ulysses's favour
// against ≤ 15 µs of extra latency (28 α against 13 to 21). Its attention
// (one 4096-token block) runs at a roofline rate at least the rings' blocks',
// so Ulysses must win.
TEST(Plan, SearchPicksUlyssesWhereTheRingIsExposed) {
  const PlanResult r = search(long_input(16, 4096), cp_machine(1e15, 1e13, 0), kCp8);
  const std::vector<std::string> got = names(r);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], "ulysses");
  for (const char* n : {"ring", "hybrid2", "hybrid4"})
    EXPECT_NE(std::find(got.begin(), got.end(), n), got.end()) << n;
  EXPECT_NE(why_slower(r.ranked[1], r.ranked[0]).find("cp exposed"), std::string::npos);
}

// GQA with one kv head at T = 8192, cp 8, compute-bound (the roofline at the
// peak for every block: memory rate 1e18) with full overlap. The attention
// forward per layer is 16·64·8192²·2/8 / 1e12 = 17.2 ms, so the ring's hops
// (7·(2·(α + 1024·129·2 / β) + α + 1024·128·2 / β) = 0.57 ms per layer) hide
// behind 3× that, while every all-to-all (Ulysses's, the hybrids') is
// exposed; the compute is the same for all: the ring must win.
TEST(Plan, SearchPicksTheRingWhereItHides) {
  const PlanResult r = search(long_input(1, 8192), cp_machine(1e12, 1e18, 1), kCp8);
  const std::vector<std::string> got = names(r);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], "ring");
  double ring_exposed = 0;
  for (const AxisComm& a : r.ranked[0].comm)
    if (a.axis == "cp") ring_exposed += a.exposed_s();
  EXPECT_EQ(ring_exposed, 0.0);
  for (size_t i = 1; i < r.ranked.size(); ++i)
    EXPECT_NEAR(r.ranked[i].compute_s, r.ranked[0].compute_s, 1e-9 * r.ranked[0].compute_s);
}

// Heads that do not split over the all-to-all: refused by name, and not
// proposed. 6 heads over cp 4: Ulysses (U = 4) cannot run; hybrid2 can.
TEST(Plan, UlyssesHeadsThatDoNotSplitAreRefused) {
  PlanInput in = small_input(4);
  in.model.d_model = 192, in.model.n_heads = 6, in.model.n_kv_heads = 6;
  const Machine m = load_machine("h100-8x-ib");
  const LayoutSpec pinned = parse_layout("dp1,tp1,pp1,cp4,ulysses,zero0,mbs1");
  try {
    predict(in, pinned.layout, m);
    ADD_FAILURE() << "ulysses with 6 heads over 4 ranks was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.cp_impl = ulysses (cp 4, tp 1)"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("(n_heads / tp = 6) divisible by 4"), std::string::npos) << e.what();
  }
  LayoutSpec open = pinned;
  open.has_zero = open.has_mbs = false;
  const PlanResult refused = search(in, m, open);
  EXPECT_TRUE(refused.ranked.empty() && refused.too_big.empty());
  EXPECT_NE(refused.first_invalid_reason.find("ulysses"), std::string::npos) << refused.first_invalid_reason;
  open.has_cp_impl = false;  // the search proposes only what runs
  std::vector<std::string> got = names(search(in, m, open));
  EXPECT_EQ(std::find(got.begin(), got.end(), "ulysses"), got.end());
  EXPECT_NE(std::find(got.begin(), got.end(), "hybrid2"), got.end());
  EXPECT_THROW(check_layout(in, parse_layout("dp4,tp1,pp1,cp1,ulysses").layout), ConfigError);  // cp 1
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

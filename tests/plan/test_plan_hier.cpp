// The hierarchical gradient all-reduce in the planner (layout token `hier`,
// parallel.dp_allreduce = hierarchical): the token, the dp × cp group's ranks
// per node under the planner's placement, its α-β time against flat by hand,
// the search's choice, and the trainer's rules refused by name.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "cost/memory_estimate.h"
#include "plan/collectives.h"
#include "plan/cost.h"
#include "plan/machine.h"
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

// Two nodes of four devices; nothing overlaps, so the dp row is all exposed.
Machine two_nodes(AlphaBeta intra, AlphaBeta inter) {
  Machine m;
  m.name = "two-nodes";
  m.devices_per_node = 4;
  m.peak_flops = 1e12;
  m.memory_bytes = 1e15;
  m.intra = intra;
  m.inter = inter;
  m.overlap = 0;
  return m;
}

const AxisComm& dp_row(const Prediction& p) {
  for (const AxisComm& a : p.comm)
    if (a.axis == "dp") return a;
  throw std::runtime_error("no dp row");
}

std::string refusal(const PlanInput& in, const std::string& layout, const Machine& m) {
  try {
    predict(in, parse_layout(layout).layout, m);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(PlanHier, TokenRoundTripAndConfig) {
  LayoutSpec s = parse_layout("dp8,tp1,pp1,cp1,zero1,mbs2,hier");
  EXPECT_TRUE(s.has_hier);
  EXPECT_TRUE(s.layout.hier_dp);
  EXPECT_EQ(to_string(s.layout), "dp8,tp1,pp1,cp1,ep1,zero1,mbs2,v1,recompute=none,hier");
  EXPECT_EQ(to_string(parse_layout(to_string(s.layout)).layout), to_string(s.layout));
  const Config c = to_config(small_input(8), s.layout);
  EXPECT_EQ(c.parallel.dp_allreduce, "hierarchical");
  EXPECT_EQ(c.parsed().dp_allreduce, DpAllReduce::hierarchical);
  s = parse_layout("dp8,nohier");
  EXPECT_TRUE(s.has_hier);
  EXPECT_FALSE(s.layout.hier_dp);
  EXPECT_EQ(to_string(s.layout), "dp8,tp1,pp1,cp1,ep1,zero0,mbs1,v1,recompute=none");
  EXPECT_EQ(to_config(small_input(8), s.layout).parallel.dp_allreduce, "flat");
  EXPECT_FALSE(parse_layout("dp8").has_hier);
}

// Ranks are ((d·pp + p)·cp + c)·tp + t, node = rank ÷ D; a group fixes (p, t).
TEST(PlanHier, RanksPerNodeByHand) {
  const auto split = [](const char* layout, int64_t dpn) {
    return dp_node_split(parse_layout(layout).layout, dpn);
  };
  struct Case {
    const char* layout;
    int64_t dpn, g, n;
  } cases[] = {
      {"dp16,tp4", 8, 2, 8},     // members 4 apart: 2 of 8 ranks a node
      {"dp8,tp1", 4, 4, 2},      // a node holds 4 consecutive dp ranks
      {"dp2,tp4", 4, 1, 2},      // tp fills the node: one member each
      {"dp2,pp2,cp2", 4, 2, 2},  // group (p 0): {0, 1, 4, 5}
      {"dp2,pp4,cp2", 4, 2, 2},  // {0, 1, 8, 9}: a pp slice's cp pair on a node
      {"dp2,cp4,tp2", 4, 2, 4},  // {0, 2, 4, …, 14}: D / tp = 2 a node
      {"dp4,tp2", 8, 4, 1},      // the whole group on one node
      {"dp2,pp2,tp4", 4, 1, 2},  // a node is one stage's tp group
  };
  for (const Case& c : cases) {
    const DpNodeSplit s = split(c.layout, c.dpn);
    EXPECT_TRUE(s.even) << c.layout;
    EXPECT_EQ(s.g, c.g) << c.layout;
    EXPECT_EQ(s.n, c.n) << c.layout;
  }
  EXPECT_FALSE(split("dp6", 4).even);  // 4 on node 0, 2 on node 1
  EXPECT_EQ(split("dp6", 4).other, 2);
  EXPECT_FALSE(split("dp3,tp2", 4).even);  // t 0: {0, 2 | 4}
  // The closed form of plan/collectives.h where the sizes are powers of two.
  for (int64_t dp : {1, 2, 4, 8})
    for (int64_t pp : {1, 2, 4})
      for (int64_t cp : {1, 2, 4})
        for (int64_t tp : {1, 2, 4, 8})
          for (int64_t D : {1, 2, 4, 8, 16}) {
            PlanLayout l;
            l.dp = dp, l.pp = pp, l.cp = cp, l.tp = tp;
            const int64_t S = pp * cp * tp;
            const int64_t g = D >= S         ? std::min(dp * cp, D / (pp * tp))
                              : D >= cp * tp ? cp
                              : D >= tp      ? D / tp
                                             : 1;
            EXPECT_EQ(dp_node_split(l, D).g, g) << to_string(l) << " D " << D;
          }
}

// dp 8 on two nodes of 4 (g 4, n 2), ZeRO 0, B gradient bytes:
//   flat = 2·7·α_x + 2·7/8·B/β_x
//   hier = 2·(3·α_i + 3/4·B/β_i)  +  2·1·α_x + 2·1/2·(B/4)/β_x
// Over a 1 Gbit/s link the flat ring sends 7× the bytes across: hier wins, and the search takes it.
TEST(PlanHier, SlowLinkMakesHierarchicalCheaper) {
  const PlanInput in = small_input(8);
  const AlphaBeta intra{5e-6, 1e11}, inter{200e-6, 125e6};
  Machine m = two_nodes(intra, inter);
  const double B = double(checked_param_count(in.model)) * precision_sizes(m.precision).gradient;
  const LayoutSpec fixed = parse_layout("dp8,tp1,pp1,cp1,ep1,zero0,mbs2,v1,recompute=none,nozb");
  PlanLayout l = fixed.layout;
  const AxisComm flat = dp_row(predict(in, l, m));
  l.hier_dp = true;
  const AxisComm hier = dp_row(predict(in, l, m));
  EXPECT_NEAR(flat.total_s, 14 * inter.alpha_s + 1.75 * B / inter.bytes_per_s, 1e-12);
  const double node = 2 * (3 * intra.alpha_s + 0.75 * B / intra.bytes_per_s);
  EXPECT_NEAR(hier.total_s, node + 2 * inter.alpha_s + (B / 4) / inter.bytes_per_s, 1e-12);
  EXPECT_TRUE(hier.crosses_nodes);
  EXPECT_NE(hier.what.find("hierarchical grad all-reduce"), std::string::npos) << hier.what;
  EXPECT_NE(hier.what.find("over 4 ranks in the node"), std::string::npos) << hier.what;
  EXPECT_NE(hier.what.find("over 2 nodes"), std::string::npos) << hier.what;
  EXPECT_LT(hier.total_s, flat.total_s);
  const PlanResult r = search(in, m, fixed);
  ASSERT_EQ(r.ranked.size(), 2u);
  EXPECT_TRUE(r.ranked[0].layout.hier_dp) << to_string(r.ranked[0].layout);
  EXPECT_FALSE(r.ranked[1].layout.hier_dp);
  // A shared link (Machine::shared_link): the node's 4 rings across share it, so the shard's
  // 2·1/2·B/4 bytes go at β_x / 4; flat's all-reduce keeps the link per device.
  m.shared_link = true;
  EXPECT_NEAR(dp_row(predict(in, l, m)).total_s, node + 2 * inter.alpha_s + B / inter.bytes_per_s, 1e-12);
}

// A calibrated cluster's all-reduces across the nodes (CollectiveFit::across,
// `flows` groups at once; plan/calibrate.cpp measure_across_all_reduces) take
// the place of the ring: flat dp 8 is the 8-rank fit with 1 flow, dp 4 x tp 2
// the 4-rank fit with 2 (both dp groups at once), hierarchical's middle step
// the 2-rank fit with the node's 4 flows; and the fields survive the file.
TEST(PlanHier, CalibratedAcrossFitsReplaceTheRing) {
  const PlanInput in = small_input(8);
  const AlphaBeta intra{5e-6, 1e11}, inter{200e-6, 125e6};
  Machine m = two_nodes(intra, inter);
  m.collectives.push_back({"all_reduce", 8, AlphaBeta{1e-3, 20e6}, true, 1});
  m.collectives.push_back({"all_reduce", 4, AlphaBeta{2e-3, 14e6}, true, 2});
  m.collectives.push_back({"all_reduce", 2, AlphaBeta{3e-3, 5e6}, true, 4});
  const double B = double(checked_param_count(in.model)) * precision_sizes(m.precision).gradient;
  PlanLayout l = parse_layout("dp8,tp1,pp1,cp1,ep1,zero0,mbs2,v1,recompute=none,nozb").layout;
  EXPECT_NEAR(dp_row(predict(in, l, m)).total_s, 1e-3 + B / 20e6, 1e-12);
  l.hier_dp = true;
  const double node = 2 * (3 * intra.alpha_s + 0.75 * B / intra.bytes_per_s);
  EXPECT_NEAR(dp_row(predict(in, l, m)).total_s, node + 3e-3 + (B / 4) / 5e6, 1e-12);
  PlanLayout l2 = parse_layout("dp4,tp2,pp1,cp1,ep1,zero0,mbs2,v1,recompute=none,nozb").layout;
  const double B2 = B / 2 + 0.0;  // tp 2 halves the matrices; the norms are whole on each rank
  EXPECT_GT(dp_row(predict(in, l2, m)).total_s, 2e-3 + 0.9 * B2 / 14e6);
  EXPECT_LT(dp_row(predict(in, l2, m)).total_s, 2e-3 + 1.1 * B2 / 14e6);
  const Machine back = machine_from_json(machine_to_json(m), "round trip");
  const CollectiveFit* f = back.fit_across("all_reduce", 4, 2);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->fit.bytes_per_s, 14e6);
  EXPECT_EQ(back.fit("all_reduce", 4), nullptr);  // not taken for a group inside a node
}

// The trainer keeps each bucket's 1/g node shard in fp32 past the step: at dp 8 with g 4 that is a
// quarter of the gradient's floats (the < g leftover elements of a bucket aside) beyond flat's buffers.
TEST(PlanHier, NodeShardsSizedForThePlacementsG) {
  const PlanInput in = small_input(8);
  const Machine m = two_nodes({5e-6, 1e11}, {200e-6, 125e6});
  PlanLayout l = parse_layout("dp8,tp1,pp1,cp1,zero0,mbs2").layout;
  const auto comm = [&](const PlanLayout& x) {
    for (const auto& [name, bytes] : plan_memory(in, x, m).parts)
      if (name == "communication buffers") return double(bytes);
    return -1.0;
  };
  const double flat = comm(l);
  l.hier_dp = true;
  const double params = double(checked_param_count(in.model));
  EXPECT_NEAR(comm(l) - flat, params / 4 * 4, 1e-4 * params);
}

// With one link for both levels the bandwidth terms are equal,
//   2·(g−1)/g·B/β + 2·(n−1)/n·(B/g)/β = 2·(gn−1)/(gn)·B/β,
// and the latencies 2·(g−1)·α + 2·(n−1)·α against 2·(gn−1)·α: hier is cheaper
// by exactly 2·(g−1)·(n−1)·α (6α at g 4, n 2), never dearer.
TEST(PlanHier, EqualLinksDifferOnlyInLatency) {
  const PlanInput in = small_input(8);
  const AlphaBeta link{10e-6, 1e10};
  const Machine m = two_nodes(link, link);
  PlanLayout l = parse_layout("dp8,tp1,pp1,cp1,zero0,mbs2").layout;
  const double flat = dp_row(predict(in, l, m)).total_s;
  l.hier_dp = true;
  const double hier = dp_row(predict(in, l, m)).total_s;
  EXPECT_NEAR(flat - hier, 2 * 3 * 1 * link.alpha_s, 1e-12);
}

// Inside one node the cut has nothing to cut: the search keeps flat. A pinned hier there runs
// (n 1: the node's reduce-scatter and all-gather, nothing across).
TEST(PlanHier, OneNodeKeepsFlat) {
  const PlanInput in = small_input(8);
  const Machine m = load_machine("h100-8x-ib");
  for (const Prediction& p : search(in, m, parse_layout("")).ranked)
    EXPECT_FALSE(p.layout.hier_dp) << to_string(p.layout);
  const AxisComm a = dp_row(predict(in, parse_layout("dp8,tp1,pp1,cp1,zero1,mbs2,hier").layout, m));
  EXPECT_FALSE(a.crosses_nodes);
  EXPECT_NE(a.what.find("over 1 node ("), std::string::npos) << a.what;
}

TEST(PlanHier, TrainerRulesRefusedByName) {
  const PlanInput in = small_input(8);
  const Machine m = two_nodes({5e-6, 1e11}, {200e-6, 125e6});
  std::string e = refusal(in, "dp8,tp1,pp1,cp1,zero2,mbs2,hier", m);
  EXPECT_NE(e.find("parallel.dp_allreduce = hierarchical cuts the ZeRO 0/1 all-reduce"), std::string::npos)
      << e;
  EXPECT_NE(e.find("parallel.zero (2)"), std::string::npos) << e;
  e = refusal(in, "dp8,tp1,pp1,cp1,zero1,mbs2,shard4,hier", m);
  EXPECT_NE(e.find("parallel.dp_shard (4) < parallel.dp (8)"), std::string::npos) << e;
  e = refusal(in, "dp1,tp8,pp1,cp1,zero0,mbs2,hier", m);
  EXPECT_NE(e.find("needs a gradient all-reduce"), std::string::npos) << e;
  PlanInput six = small_input(6);
  six.global_batch = 12;
  e = refusal(six, "dp6,tp1,pp1,cp1,zero0,mbs2,hier", m);  // 4 on node 0, 2 on node 1
  EXPECT_NE(e.find("puts 4 of a group's ranks on one node and 2 on another"), std::string::npos) << e;
  // Pinned with zero pinned too: nothing left, and the rule is the reason; with zero open, only
  // ZeRO 0/1 are tried.
  LayoutSpec f = parse_layout("dp8,zero2,hier");
  PlanResult r = search(in, m, f);
  EXPECT_TRUE(r.ranked.empty() && r.too_big.empty());
  EXPECT_NE(r.first_invalid_reason.find("cuts the ZeRO 0/1 all-reduce"), std::string::npos)
      << r.first_invalid_reason;
  f = parse_layout("dp8,hier");
  r = search(in, m, f);
  ASSERT_FALSE(r.ranked.empty());
  for (const Prediction& p : r.ranked) {
    EXPECT_TRUE(p.layout.hier_dp);
    EXPECT_LE(p.layout.zero, 1);
  }
}

}  // namespace
}  // namespace mt::plan

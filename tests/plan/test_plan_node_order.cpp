// The node order in the planner (layout token inner=AXES, the trainer's
// --placement nodes:AXES): the token, which groups cross nodes under each order
// counted by hand, the rows' times on the link they use, and the search's
// choice between the orders.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "mesh/placement.h"
#include "model/params.h"
#include "plan/collectives.h"
#include "plan/cost.h"
#include "plan/memory.h"
#include "plan/node_order.h"
#include "plan/print.h"
#include "plan/search.h"

namespace mt::plan {
namespace {

PlanInput small_input(int64_t devices, int64_t global_batch) {
  PlanInput in;
  in.model.vocab_size = 1024;
  in.model.d_model = 256;
  in.model.n_layers = 4;
  in.model.n_heads = 8;
  in.model.n_kv_heads = 8;
  in.model.ffn_hidden = 512;
  in.model.max_seq_len = 256;
  in.devices = devices;
  in.global_batch = global_batch;
  in.seq_len = 256;
  return in;
}

// Nodes of two devices; α 0 so that each time is its bytes over a rate, nothing overlapped.
Machine two_rank_nodes(double intra_rate, double inter_rate) {
  Machine m;
  m.name = "two-rank-nodes";
  m.devices_per_node = 2;
  m.peak_flops = 1e12;
  m.memory_bytes = 1e15;
  m.intra = AlphaBeta{0, intra_rate};
  m.inter = AlphaBeta{0, inter_rate};
  m.overlap = 0;
  return m;
}

PlanLayout layout(const std::string& text) {
  return parse_layout(text).layout;
}

const AxisComm& row(const Prediction& p, const std::string& axis) {
  for (const AxisComm& a : p.comm)
    if (a.axis == axis) return a;
  throw std::runtime_error("no " + axis + " row");
}

std::string refusal(const std::string& text) {
  try {
    parse_layout(text);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(PlanNodeOrder, TokenRoundTripsAndBadOnesAreRefused) {
  LayoutSpec s = parse_layout("dp1,tp2,pp1,cp2,ulysses,zero0,mbs1,inner=cp");
  EXPECT_TRUE(s.has_inner);
  ASSERT_EQ(s.layout.inner.size(), 1u);
  EXPECT_EQ(s.layout.inner[0], Axis::cp);
  EXPECT_EQ(to_string(s.layout), "dp1,tp2,pp1,cp2,ulysses,ep1,zero0,mbs1,v1,recompute=none,inner=cp");
  EXPECT_EQ(to_string(parse_layout(to_string(s.layout)).layout), to_string(s.layout));
  // The shortest list of the same order: cp+tp fills a node as cp does (tp follows cp either way);
  // tp and tp+cp are the default, not written.
  EXPECT_EQ(node_order_name(layout("inner=cp+tp").inner), "cp");
  EXPECT_EQ(node_order_name(layout("inner=cp+dp").inner), "cp+dp");
  EXPECT_EQ(node_order_name(layout("inner=dp+cp+tp+pp").inner), "dp+cp");
  s = parse_layout("dp4,inner=tp+cp");
  EXPECT_TRUE(s.has_inner);
  EXPECT_TRUE(s.layout.inner.empty());
  EXPECT_EQ(to_string(s.layout), "dp4,tp1,pp1,cp1,ep1,zero0,mbs1,v1,recompute=none");
  EXPECT_FALSE(parse_layout("dp4").has_inner);
  // The whole order, innermost first: the named axes, then tp, cp, pp, dp without them.
  EXPECT_EQ(node_order_text(layout("")), "tp, cp, pp, dp");
  EXPECT_EQ(node_order_text(layout("inner=cp")), "cp, tp, pp, dp");
  EXPECT_EQ(node_order_text(layout("inner=cp+dp")), "cp, dp, tp, pp");
  EXPECT_EQ(node_order_text(layout("inner=dp")), "dp, tp, cp, pp");
  std::string e = refusal("dp2,inner=cp+cp");
  EXPECT_NE(e.find("--layout field 'inner=cp+cp': axis 'cp' is named twice"), std::string::npos) << e;
  e = refusal("dp2,inner=cp+ep");
  EXPECT_NE(e.find("--layout field 'inner=cp+ep': 'ep' is not a mesh axis (the node order names tp, cp, pp"),
            std::string::npos)
      << e;
  e = refusal("dp2,inner=");
  EXPECT_NE(e.find("--layout field 'inner=' names no axis"), std::string::npos) << e;
  e = refusal("dp2,inner=dp+");
  EXPECT_NE(e.find("--layout field 'inner=dp+' ends in '+'"), std::string::npos) << e;
  e = refusal("dp2,outer=dp");
  EXPECT_NE(e.find("inner=AXES"), std::string::npos) << e;  // the grammar lists the token
}

// 4 devices, 2 a node, tp 2 × cp 2. With order (o0, o1) position k = c(o0) + 2·c(o1), node = k ÷ 2:
//   default (tp, cp): node 0 = {(cp0, tp0), (cp0, tp1)}: a tp group on one node; a cp group
//                     (tp fixed) at k = t and t + 2, on nodes 0 and 1: crosses, 1 rank a node;
//   inner=cp (cp, tp): node 0 = {(cp0, tp0), (cp1, tp0)}: the reverse.
// The spans: tp's 2 (default) or 2·2 = 4 (inner=cp) positions, cp's 2·2 = 4 or 2, against 2 a node.
TEST(PlanNodeOrder, TpAndCpSwapWhichCrossesTheNodes) {
  NodeMap n = node_map(layout("dp1,tp2,pp1,cp2,ulysses"), 2);
  EXPECT_FALSE(n[PlanGroup::tp].crosses());
  EXPECT_TRUE(n[PlanGroup::cp_a2a].crosses());
  EXPECT_EQ(n[PlanGroup::cp_a2a].g, 1);
  EXPECT_EQ(n[PlanGroup::cp_a2a].ranks, 2);
  EXPECT_TRUE(n[PlanGroup::dp_cp].crosses());  // dp 1: the gradient reduction is over the cp pair
  n = node_map(layout("dp1,tp2,pp1,cp2,ulysses,inner=cp"), 2);
  EXPECT_TRUE(n[PlanGroup::tp].crosses());
  EXPECT_EQ(n[PlanGroup::tp].g, 1);
  EXPECT_FALSE(n[PlanGroup::cp_a2a].crosses());
  EXPECT_EQ(n[PlanGroup::cp_a2a].g, 2);
  EXPECT_FALSE(n[PlanGroup::dp_cp].crosses());
  // The same through predict's rows.
  const PlanInput in = small_input(4, 16);
  const Machine m = two_rank_nodes(1e12, 1e8);
  Prediction p = predict(in, layout("dp1,tp2,pp1,cp2,ulysses,zero0,mbs1"), m);
  EXPECT_FALSE(row(p, "tp").crosses_nodes);
  EXPECT_TRUE(row(p, "cp").crosses_nodes);
  EXPECT_NE(format_prediction(in, p, m).find("filled tp, cp, pp, dp innermost first (--placement nodes); "
                                             "groups across nodes: cp all-to-all, dp x cp"),
            std::string::npos)
      << format_prediction(in, p, m);
  p = predict(in, layout("dp1,tp2,pp1,cp2,ulysses,zero0,mbs1,inner=cp"), m);
  EXPECT_TRUE(row(p, "tp").crosses_nodes);
  EXPECT_FALSE(row(p, "cp").crosses_nodes);
  EXPECT_NE(row(p, "tp").what.find("over 2 ranks (crosses nodes)"), std::string::npos) << row(p, "tp").what;
  EXPECT_NE(format_prediction(in, p, m).find("filled cp, tp, pp, dp innermost first (--placement nodes:cp); "
                                             "groups across nodes: tp\n"),
            std::string::npos)
      << format_prediction(in, p, m);
}

// dp × cp's ranks a node (g) and nodes (n) under the orders, by hand (k as above, node = k ÷ D):
//   dp2,tp2, D 2:      default k = t + 2d: a group (t fixed) at k = t, t + 2: g 1, n 2;
//                      inner=dp k = d + 2t: at k = 2t, 2t + 1, one node: g 2, n 1.
//   dp4,cp2,tp2, D 4:  default k = t + 2c + 4d: node = d, holding a group's 2 cp ranks: g 2, n 4;
//                      inner=cp+dp k = c + 2d + 8t: node = (c + 2d) ÷ 4, cp 0–1 × 2 dp: g 4, n 2;
//                      inner=dp k = d + 4t + 8c: node = t + 2c, the 4 dp of one (t, c): g 4, n 2.
//   dp3,tp2, D 4, inner=dp: k = d + 3t; node 0 = k 0–3 holds t 0's 3 and t 1's d 0, node 1 t 1's
//                      d 1, 2: not even (3 and 1 on node 0), which hier refuses by name.
TEST(PlanNodeOrder, DpNodeSplitFollowsTheOrder) {
  struct Case {
    const char* layout;
    int64_t dpn, g, n;
  } cases[] = {
      {"dp2,tp2", 2, 1, 2},
      {"dp2,tp2,inner=dp", 2, 2, 1},
      {"dp4,cp2,tp2", 4, 2, 4},
      {"dp4,cp2,tp2,inner=cp+dp", 4, 4, 2},
      {"dp4,cp2,tp2,inner=dp", 4, 4, 2},
  };
  for (const Case& c : cases) {
    const DpNodeSplit s = dp_node_split(layout(c.layout), c.dpn);
    EXPECT_TRUE(s.even) << c.layout;
    EXPECT_EQ(s.g, c.g) << c.layout;
    EXPECT_EQ(s.n, c.n) << c.layout;
  }
  const DpNodeSplit s = dp_node_split(layout("dp3,tp2,inner=dp"), 4);
  EXPECT_FALSE(s.even);
  EXPECT_EQ(s.g, 3);
  EXPECT_EQ(s.other, 1);
  PlanLayout l = layout("dp3,tp2,zero0,mbs1,hier,inner=dp");
  try {
    check_hier_nodes(l, 4);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("(node order dp, tp, cp, pp) puts 3 of a group's ranks on one node "
                                         "and 1 on another"),
              std::string::npos)
        << e.what();
  }
  // The default order's counts are the mesh's rank order: k = rank.
  EXPECT_EQ(dp_node_split(layout("dp2,pp2,cp2"), 4).g, 2);  // group (p 0): ranks {0, 1, 4, 5}
}

// The span rule for a whole axis, over every order of sizes that are powers of two: with the
// order innermost first, axis A's group is the positions base + j·s (j < size(A)), s the product of
// the sizes before A, so it spans s·size(A) and, aligned, crosses iff size(A) > 1 and that span
// exceeds the node. (cp's group is Ulysses's all-to-all over all cp ranks.)
TEST(PlanNodeOrder, AxisGroupsCrossWhenTheirSpanExceedsANode) {
  std::vector<Axis> perm = {Axis::pp, Axis::dp, Axis::cp, Axis::tp};
  std::sort(perm.begin(), perm.end());
  do {
    for (int64_t dp : {1, 2, 4})
      for (int64_t pp : {1, 2})
        for (int64_t cp : {1, 2, 4})
          for (int64_t tp : {1, 2, 4})
            for (int64_t D : {1, 2, 4, 8}) {
              PlanLayout l;
              l.dp = dp, l.pp = pp, l.cp = cp, l.tp = tp, l.inner = perm;
              if (cp > 1) l.cp_impl = cp::CpImpl::ulysses;
              const auto size = [&](Axis a) {
                return a == Axis::dp ? dp : a == Axis::pp ? pp : a == Axis::cp ? cp : tp;
              };
              const NodeMap n = node_map(l, D);
              const std::pair<Axis, PlanGroup> groups[] = {{Axis::tp, PlanGroup::tp},
                                                           {Axis::pp, PlanGroup::pp},
                                                           {Axis::dp, PlanGroup::dp},
                                                           {Axis::cp, PlanGroup::cp_a2a}};
              for (const auto& [axis, group] : groups) {
                int64_t span = 1;
                for (Axis a : perm) {
                  span *= size(a);
                  if (a == axis) break;
                }
                EXPECT_EQ(n[group].crosses(), size(axis) > 1 && span > D)
                    << to_string(l) << " D " << D << " " << axis_name(axis);
              }
            }
  } while (std::next_permutation(perm.begin(), perm.end()));
}

// ep's groups are blocks of ep consecutive i = d·cp + c (cp inner), tp and pp fixed:
//   dp2,tp2,ep2 on D 2:      default k = t + 2d: the block {d 0, d 1} at k = t, t + 2: crosses;
//                            inner=dp k = d + 2t: at k = 2t, 2t + 1: inside (and tp crosses).
//   dp2,cp2,tp2,ep4 on D 4:  default k = t + 2c + 4d: the whole dp × cp of one t on nodes 0 and 1;
//                            inner=cp+dp k = c + 2d + 4t: node = t, all 4 inside.
TEST(PlanNodeOrder, EpGroupsInsideUnderDpOrders) {
  EXPECT_TRUE(node_map(layout("dp2,tp2,ep2"), 2)[PlanGroup::ep].crosses());
  EXPECT_FALSE(node_map(layout("dp2,tp2,ep2,inner=dp"), 2)[PlanGroup::ep].crosses());
  EXPECT_TRUE(node_map(layout("dp2,tp2,ep2,inner=dp"), 2)[PlanGroup::tp].crosses());
  const NodeMap d = node_map(layout("dp2,cp2,tp2,ep4"), 4);
  EXPECT_TRUE(d[PlanGroup::ep].crosses());
  EXPECT_EQ(d[PlanGroup::ep].g, 2);
  const NodeMap cd = node_map(layout("dp2,cp2,tp2,ep4,inner=cp+dp"), 4);
  EXPECT_FALSE(cd[PlanGroup::ep].crosses());
  EXPECT_EQ(cd[PlanGroup::ep].g, 4);
  // The ep row of an MoE model follows, and the search plans both orders.
  PlanInput in = small_input(4, 16);
  in.model.n_experts = 4;
  const Machine m = two_rank_nodes(1e12, 1e8);
  EXPECT_TRUE(row(predict(in, layout("dp2,tp2,pp1,cp1,ep2,zero0,mbs1"), m), "ep").crosses_nodes);
  EXPECT_FALSE(row(predict(in, layout("dp2,tp2,pp1,cp1,ep2,zero0,mbs1,inner=dp"), m), "ep").crosses_nodes);
  const PlanResult r = search(in, m, parse_layout("dp2,tp2,pp1,cp1,ep2,zero0,mbs1,v1,nosp,recompute=none"));
  ASSERT_EQ(r.ranked.size(), 2u);
  EXPECT_NE(r.ranked[0].layout.inner, r.ranked[1].layout.inner);
}

// The ep row's bytes (small_input, 4 experts, top_k 2, every layer MoE: 4): per microbatch of n = 256
// tokens each MoE layer sends the rows out and back, forward and backward (4 all-to-alls of
// n·top_k·d·el = 256·2·256·2 = 262,144 B: the machine's default precision is bf16, el 2) and the
// expert counts (ep·E·4 = 32 B). Every tp rank routes the
// tokens it holds: without SP all n (the trainer's ledger at tp 2: the whole microbatch's rows), with SP
// n / tp. 8 microbatches a dp rank (global batch 16 over dp 2).
TEST(PlanNodeOrder, EpRowsAreTheTokensATpRankHolds) {
  PlanInput in = small_input(4, 16);
  in.model.n_experts = 4;
  const Machine m = two_rank_nodes(1e12, 1e8);
  const double rows = 262144, counts = 32, mb = 8;
  const double nosp = row(predict(in, layout("dp2,tp2,pp1,cp1,ep2,zero0,mbs1"), m), "ep").bytes;
  EXPECT_DOUBLE_EQ(nosp, mb * 4 * (4 * rows + counts));
  const double sp = row(predict(in, layout("dp2,tp2,pp1,cp1,ep2,zero0,mbs1,sp"), m), "ep").bytes;
  EXPECT_DOUBLE_EQ(sp, mb * 4 * (4 * rows / 2 + counts));
  // Across the link (E − g)/E = 1/2 of the rows leave the rank: (rows / 2) / β a call; on a shared
  // link the node's two ranks send at once, each at β / 2: rows / β (the counts: 32 B, negligible).
  const AxisComm own = row(predict(in, layout("dp2,tp2,pp1,cp1,ep2,zero0,mbs1"), m), "ep");
  ASSERT_TRUE(own.crosses_nodes);
  EXPECT_NEAR(own.total_s, mb * 4 * 4 * rows / 2 / 1e8, 1e-3 * own.total_s);
  Machine shared = m;
  shared.shared_link = true;
  const AxisComm both = row(predict(in, layout("dp2,tp2,pp1,cp1,ep2,zero0,mbs1"), shared), "ep");
  EXPECT_NEAR(both.total_s, mb * 4 * 4 * rows / 1e8, 1e-3 * both.total_s);
}

// tp 2 × cp 2 Ulysses on 4 devices, 2 a node, intra β_i = 1e12, inter β_x = 1e8 B/s, α 0,
// 64 microbatches of one sequence (n = 256 / 2 = 128 tokens a rank), bf16 or fp32 elements of `el`.
// Per microbatch (4 layers):
//   tp: 4·4 + 2 all-reduces of n·d·el (d 256) and 3 of n·4 B; over 2 ranks each is bytes / β;
//   cp: per layer 4 all-to-alls of 2·n·w·el, w = 193, 66, 323, 192 (H_l 4, Hu = KVu = 2, D 32,
//       row 192; sum 774); half of each leaves the rank: n·w·el / β, inside or across alike.
// So TP moves 18·256 = 4608 n·el a microbatch and the all-to-alls 4·774 = 3096 n·el: TP's bytes
// dominate, and on the slow link the default (tp inside, cp across) is cheaper; the gradient
// all-reduce over the cp pair (B = params / 2 · 4 B, bytes / β) crosses with cp.
TEST(PlanNodeOrder, SearchKeepsTheDefaultWhereTpsBytesDominate) {
  const PlanInput in = small_input(4, 64);
  const double bi = 1e12, bx = 1e8;
  const Machine m = two_rank_nodes(bi, bx);
  const double el = precision_sizes(m.precision).activation, n = 128, mb = 64;
  const double tp_bytes = 18 * n * 256 * el + 3 * n * 4, cp_bytes = 4 * 774 * n * el;
  const Prediction def = predict(in, layout("dp1,tp2,pp1,cp2,ulysses,zero0,mbs1"), m);
  const Prediction cp = predict(in, layout("dp1,tp2,pp1,cp2,ulysses,zero0,mbs1,inner=cp"), m);
  EXPECT_NEAR(row(def, "tp").total_s, mb * tp_bytes / bi, 1e-12);
  EXPECT_NEAR(row(def, "cp").total_s, mb * cp_bytes / bx, 1e-12);
  EXPECT_NEAR(row(cp, "tp").total_s, mb * tp_bytes / bx, 1e-12);
  EXPECT_NEAR(row(cp, "cp").total_s, mb * cp_bytes / bi, 1e-12);
  const double B = double(checked_param_count(in.model)) / 2 * precision_sizes(m.precision).gradient;
  EXPECT_NEAR(row(def, "dp").total_s, B / bx, 1e-12);
  EXPECT_NEAR(row(cp, "dp").total_s, B / bi, 1e-12);
  // Everything else is the same: the step differs by the moved terms.
  const double diff = (mb * (tp_bytes - cp_bytes) - B) * (1 / bx - 1 / bi);
  EXPECT_NEAR(cp.step_s - def.step_s, diff, 1e-9 * def.step_s);
  EXPECT_GT(diff, 0);
  const PlanResult r =
      search(in, m, parse_layout("dp1,tp2,pp1,cp2,ulysses,ep1,zero0,mbs1,v1,nosp,recompute=none"));
  ASSERT_EQ(r.ranked.size(), 2u);  // the default and inner=cp; no other order moves a group
  EXPECT_TRUE(r.ranked[0].layout.inner.empty()) << to_string(r.ranked[0].layout);
  EXPECT_EQ(node_order_name(r.ranked[1].layout.inner), "cp");
  EXPECT_NE(why_slower(r.ranked[1], r.ranked[0]).find("tp exposed (crosses nodes)"), std::string::npos)
      << why_slower(r.ranked[1], r.ranked[0]);
}

// tp 4 × cp 2 Ulysses on 8 devices, 2 a node (links as above):
//   default (k = t + 4c): a node holds 2 of a tp group, and a cp pair (t fixed) sits at k = t, t + 4:
//     both tp and cp's all-to-all cross;
//   inner=cp (k = c + 2t): a node holds a cp pair: only tp crosses (4 nodes), the same ring either way.
// The all-to-alls (H_l 2, Hu = KVu = 1, row 96, w = 97, 33, 162, 96, sum 388) and the gradient
// all-reduce over the cp pair move inside: inner=cp is cheaper by 64·4·388·n·el + B over
// (1/β_x − 1/β_i), and the search takes it.
TEST(PlanNodeOrder, SearchPicksInnerCpWhereTheAllToAllsWouldCross) {
  const PlanInput in = small_input(8, 64);
  const double bi = 1e12, bx = 1e8;
  const Machine m = two_rank_nodes(bi, bx);
  const double el = precision_sizes(m.precision).activation, n = 128, mb = 64;
  const double cp_bytes = 4 * 388 * n * el;
  const double B = double(checked_param_count(in.model)) / 4 * precision_sizes(m.precision).gradient;
  const Prediction def = predict(in, layout("dp1,tp4,pp1,cp2,ulysses,zero0,mbs1"), m);
  const Prediction cp = predict(in, layout("dp1,tp4,pp1,cp2,ulysses,zero0,mbs1,inner=cp"), m);
  EXPECT_TRUE(row(def, "tp").crosses_nodes);
  EXPECT_TRUE(row(cp, "tp").crosses_nodes);
  EXPECT_DOUBLE_EQ(row(def, "tp").total_s, row(cp, "tp").total_s);
  EXPECT_NEAR(row(def, "cp").total_s, mb * cp_bytes / bx, 1e-12);
  EXPECT_NEAR(row(cp, "cp").total_s, mb * cp_bytes / bi, 1e-12);
  EXPECT_NEAR(def.step_s - cp.step_s, (mb * cp_bytes + B) * (1 / bx - 1 / bi), 1e-9 * def.step_s);
  const PlanResult r =
      search(in, m, parse_layout("dp1,tp4,pp1,cp2,ulysses,ep1,zero0,mbs1,v1,nosp,recompute=none"));
  ASSERT_EQ(r.ranked.size(), 2u);
  EXPECT_EQ(to_string(r.ranked[0].layout),
            "dp1,tp4,pp1,cp2,ulysses,ep1,zero0,mbs1,v1,recompute=none,inner=cp");
  EXPECT_NE(why_slower(r.ranked[1], r.ranked[0]).find("cp exposed (crosses nodes)"), std::string::npos)
      << why_slower(r.ranked[1], r.ranked[0]);
}

// The 2 × 2 emulated cluster (one shared link between the nodes, Machine::shared_link): tp 2 × cp 2
// as in SearchKeepsTheDefaultWhereTpsBytesDominate, but the all-to-all's flows leaving a node at once
// (both ranks') share the link, each at β_x / 2, while an all-reduce takes it per device (the time
// model's rule, docs/PLANNER.md "cp's attention"): across the link the default moves 2·3096 n·el a
// microbatch at β_x against inner=cp's 4608, so inner=cp wins (its gradient all-reduce inside too).
TEST(PlanNodeOrder, SharedLinkTurnsTheChoiceToInnerCp) {
  const PlanInput in = small_input(4, 64);
  const double bi = 1e12, bx = 1e8;
  Machine m = two_rank_nodes(bi, bx);
  m.shared_link = true;
  const double el = precision_sizes(m.precision).activation, n = 128, mb = 64;
  const Prediction def = predict(in, layout("dp1,tp2,pp1,cp2,ulysses,zero0,mbs1"), m);
  EXPECT_NEAR(row(def, "cp").total_s, mb * 4 * 774 * n * el / (bx / 2), 1e-12);
  const PlanResult r =
      search(in, m, parse_layout("dp1,tp2,pp1,cp2,ulysses,ep1,zero0,mbs1,v1,nosp,recompute=none"));
  ASSERT_EQ(r.ranked.size(), 2u);
  EXPECT_EQ(node_order_name(r.ranked[0].layout.inner), "cp");
}

// Dense dp 2 × tp 2 on 4 devices, 2 a node, few tokens (global batch 2, sequences of 32): TP moves
// 4·4 + 2 = 18 all-reduces of n·d·el (n = 32, el ≤ 4 B: ≤ 0.6 MB) a step, the gradient all-reduce
// B = params / 2 · 4 B ≈ 6 MB. inner=dp keeps dp's pair inside and sends tp across; with nothing
// overlapped the search takes it. The search tries inner=dp only where dp > 1.
TEST(PlanNodeOrder, SearchPicksInnerDpWhereTheGradientsDominate) {
  PlanInput in = small_input(4, 2);
  in.seq_len = 32;
  const Machine m = two_rank_nodes(1e12, 1e8);
  const double tp_bytes = 18 * 32 * 256 * precision_sizes(m.precision).activation + 3 * 32 * 4;
  const double B = double(checked_param_count(in.model)) / 2 * precision_sizes(m.precision).gradient;
  ASSERT_GT(B, 5 * tp_bytes);
  const PlanResult r =
      search(in, m, parse_layout("dp2,tp2,pp1,cp1,ep1,zero0,mbs1,v1,nosp,recompute=none,nohier"));
  ASSERT_EQ(r.ranked.size(), 2u);
  EXPECT_EQ(node_order_name(r.ranked[0].layout.inner), "dp");
  EXPECT_TRUE(row(r.ranked[0], "tp").crosses_nodes);
  EXPECT_FALSE(row(r.ranked[0], "dp").crosses_nodes);
  for (const Prediction& p : search(in, m, parse_layout("dp1,tp4,pp1,cp1,zero0,mbs1")).ranked)
    EXPECT_TRUE(p.layout.inner.empty()) << to_string(p.layout);
}

// On one node every order puts every group inside: the search plans the default alone, and a
// pinned order predicts what the default does.
TEST(PlanNodeOrder, OneNodePlansTheDefaultOnly) {
  const PlanInput in = small_input(8, 16);
  const Machine m = load_machine("h100-8x-ib");
  for (const Prediction& p : search(in, m, parse_layout("")).ranked)
    EXPECT_TRUE(p.layout.inner.empty()) << to_string(p.layout);
  const Prediction a = predict(in, layout("dp2,tp2,pp1,cp2,ulysses,zero1,mbs1"), m);
  const Prediction b = predict(in, layout("dp2,tp2,pp1,cp2,ulysses,zero1,mbs1,inner=cp+dp"), m);
  EXPECT_DOUBLE_EQ(a.step_s, b.step_s);
  // A pinned order is the only one tried.
  const PlanResult r = search(in, two_rank_nodes(1e12, 1e8), parse_layout("dp2,tp2,cp2,mbs1,zero0,inner=cp"));
  ASSERT_FALSE(r.ranked.empty());
  for (const Prediction& p : r.ranked)
    EXPECT_EQ(node_order_name(p.layout.inner), "cp") << to_string(p.layout);
}

}  // namespace
}  // namespace mt::plan

namespace mt::plan {
namespace {

// The planner's node order is the trainer's: for every order the search tries and a few sizes, the
// nodes each group touches under plan/node_order.h's count equal those under mesh/placement.h's
// positions (node = the node of the rank that holds the position, ranks in blocks of D a node).
TEST(PlanNodeOrder, TheCountIsTheTrainersPlacement) {
  const std::vector<std::string> orders = {"", "cp", "cp+dp", "dp"};
  const std::vector<MeshSizes> shapes = {
      {.dp = 2, .cp = 2, .tp = 2}, {.dp = 4, .tp = 2}, {.dp = 2, .pp = 2, .cp = 2, .tp = 2}};
  for (const MeshSizes& s : shapes)
    for (int64_t D : {2, 4})
      for (const std::string& o : orders) {
        const int P = s.dp * s.pp * s.cp * s.tp;
        std::vector<int> node_of_rank(static_cast<size_t>(P));
        for (int r = 0; r < P; ++r)
          node_of_rank[static_cast<size_t>(r)] = r / static_cast<int>(D);
        const std::vector<int> pos =
            mesh_positions(node_of_rank, parse_placement(o.empty() ? "nodes" : "nodes:" + o), s);
        std::vector<int> node_of_pos(static_cast<size_t>(P));
        for (int r = 0; r < P; ++r)
          node_of_pos[static_cast<size_t>(pos[static_cast<size_t>(r)])] =
              node_of_rank[static_cast<size_t>(r)];
        std::string text = "dp" + std::to_string(s.dp) + ",tp" + std::to_string(s.tp) + ",pp" +
                           std::to_string(s.pp) + ",cp" + std::to_string(s.cp) +
                           (o.empty() ? "" : ",inner=" + o);
        const NodeMap n = node_map(layout(text), D);
        const auto most_nodes = [&](AxisSet set) {
          int64_t most = 1;
          for (const std::vector<int>& g : mesh_group_ranks(s, set)) {
            std::set<int> touched;
            for (int p : g)
              touched.insert(node_of_pos[static_cast<size_t>(p)]);
            most = std::max<int64_t>(most, static_cast<int64_t>(touched.size()));
          }
          return most;
        };
        const std::string where = text + " on nodes of " + std::to_string(D);
        EXPECT_EQ(n[PlanGroup::tp].nodes, most_nodes(axis_bit(Axis::tp))) << where;
        EXPECT_EQ(n[PlanGroup::pp].nodes, most_nodes(axis_bit(Axis::pp))) << where;
        EXPECT_EQ(n[PlanGroup::dp].nodes, most_nodes(axis_bit(Axis::dp))) << where;
        EXPECT_EQ(n[PlanGroup::dp_cp].nodes, most_nodes(axis_bit(Axis::dp) | axis_bit(Axis::cp))) << where;
      }
}

}  // namespace
}  // namespace mt::plan

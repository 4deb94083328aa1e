// Pipeline schedules: hand-derived golden cases, every valid (kind, pp, v, m)
// simulated and compared with the bubble and memory theory, the start-up
// rules, and the simulator catching broken schedules.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "pipeline/render.h"
#include "pipeline/schedule.h"
#include "pipeline/simulate.h"

namespace mt::pp {
namespace {

// "F0 F1 B0 …" (chunk letter appended when v > 1): a rank's compute order.
std::string compute_order(const Schedule& s, int rank) {
  std::string out;
  for (const Action& a : s.ranks[static_cast<size_t>(rank)]) {
    if (a.op != Op::forward && a.op != Op::backward) continue;
    if (!out.empty()) out += ' ';
    out += a.op == Op::forward ? 'F' : 'B';
    out += std::to_string(a.microbatch);
    if (s.v > 1) out += static_cast<char>('a' + s.chunk_of(a.vstage));
  }
  return out;
}

// The start times of a rank's compute actions, in its order.
std::vector<int> compute_starts(const Schedule& s, const SimResult& r, int rank) {
  std::vector<int> out;
  const auto& list = s.ranks[static_cast<size_t>(rank)];
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].op == Op::forward || list[i].op == Op::backward)
      out.push_back(r.time[static_cast<size_t>(rank)][i]);
  }
  return out;
}

std::string config_error(ScheduleKind kind, int pp, int v, int m, int n_layers) {
  try {
    validate_schedule(kind, pp, v, m, n_layers);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ScheduleKindTest, ParsesTheThreeNamesAndRejectsOthers) {
  EXPECT_EQ(parse_schedule_kind("gpipe"), ScheduleKind::gpipe);
  EXPECT_EQ(parse_schedule_kind("1f1b"), ScheduleKind::one_f_one_b);
  EXPECT_EQ(parse_schedule_kind("interleaved"), ScheduleKind::interleaved);
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved})
    EXPECT_EQ(parse_schedule_kind(schedule_kind_name(k)), k);
  try {
    parse_schedule_kind("1F1B");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "unknown pipeline schedule '1F1B': use gpipe, 1f1b, interleaved or zbh1");
  }
}

TEST(ValidateScheduleTest, EachRuleFailsWithItsNumbers) {
  using K = ScheduleKind;
  EXPECT_EQ(config_error(K::one_f_one_b, 4, 1, 8, 8), "(no error)");
  EXPECT_EQ(config_error(K::interleaved, 4, 2, 8, 8), "(no error)");
  EXPECT_EQ(config_error(K::gpipe, 4, 1, 3, 4), "(no error)");  // gpipe takes any number of microbatches
  EXPECT_EQ(config_error(K::one_f_one_b, 4, 1, 8, 3),
            "n_layers (3) must be at least pp (4) x v (1) = 4: every virtual pipeline stage needs a layer");
  EXPECT_EQ(config_error(K::interleaved, 2, 3, 4, 5),
            "n_layers (5) must be at least pp (2) x v (3) = 6: every virtual pipeline stage needs a layer");
  EXPECT_EQ(
      config_error(K::one_f_one_b, 4, 1, 3, 8),
      "the 1f1b schedule needs microbatches (3) >= pp (4): with fewer it never reaches its steady state "
      "(gpipe runs any number)");
  EXPECT_EQ(
      config_error(K::interleaved, 4, 2, 6, 8),
      "microbatches (6) must be a multiple of pp (4) for the interleaved schedule: microbatches go through "
      "the chunks in groups of pp");
  EXPECT_EQ(
      config_error(K::gpipe, 2, 2, 4, 8),
      "v (2) model chunks per rank needs the interleaved schedule; gpipe runs one chunk per rank (v = 1)");
  EXPECT_EQ(
      config_error(K::one_f_one_b, 2, 3, 4, 8),
      "v (3) model chunks per rank needs the interleaved schedule; 1f1b runs one chunk per rank (v = 1)");
  EXPECT_EQ(
      config_error(K::interleaved, 2, 1, 4, 8),
      "the interleaved schedule needs v >= 2 model chunks per rank, got v = 1 (with one chunk per rank use "
      "1f1b)");
  EXPECT_EQ(config_error(K::gpipe, 0, 1, 4, 8), "pp (0) must be at least 1");
  EXPECT_EQ(config_error(K::interleaved, 2, 0, 4, 8), "v (0) model chunks per rank must be at least 1");
  EXPECT_EQ(config_error(K::gpipe, 2, 1, 0, 8), "microbatches (0) must be at least 1");
  // make_schedule applies the same rules (without n_layers).
  EXPECT_THROW(make_schedule(K::one_f_one_b, 4, 1, 3), ConfigError);
  EXPECT_THROW(make_schedule(K::interleaved, 4, 2, 6), ConfigError);
}

// Derived by hand from the definition. Rank 0 warms up with min(pp−0−1, 3) = 1
// forward, then F1 B0, F2 B1, then cools down with B2; rank 1 (the last stage)
// has no warm-up. With F = 1 and B = 2: rank 0 F0 [0,1) F1 [1,2); rank 1 F0
// [1,2) B0 [2,4); rank 0 B0 [4,6) (gradient at 4) F2 [6,7); rank 1 F1 [4,5)
// (activation sent at 2, rank 1 busy until 4) B1 [5,7); rank 0 B1 [7,9); rank 1
// F2 [7,8) B2 [8,10); rank 0 B2 [10,12). Makespan 12 = 3·(m + pp − 1).
TEST(GoldenScheduleTest, OneFOneBTwoRanksThreeMicrobatches) {
  const Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 3);
  ASSERT_EQ(s.ranks.size(), 2u);
  EXPECT_EQ(compute_order(s, 0), "F0 F1 B0 F2 B1 B2");
  EXPECT_EQ(compute_order(s, 1), "F0 B0 F1 B1 F2 B2");
  // Rank 0's full list: stage 0 receives no activation and sends no gradient;
  // tags are 2·(m·2 + k_sender) + grad.
  const std::vector<Action> rank0 = {
      {Op::forward, 0, 0, -1, -1},  {Op::send_act, 0, 0, 1, 0},   {Op::forward, 1, 0, -1, -1},
      {Op::send_act, 1, 0, 1, 4},   {Op::recv_grad, 0, 0, 1, 3},  {Op::backward, 0, 0, -1, -1},
      {Op::forward, 2, 0, -1, -1},  {Op::send_act, 2, 0, 1, 8},   {Op::recv_grad, 1, 0, 1, 7},
      {Op::backward, 1, 0, -1, -1}, {Op::recv_grad, 2, 0, 1, 11}, {Op::backward, 2, 0, -1, -1},
  };
  ASSERT_EQ(s.ranks[0].size(), rank0.size());
  for (size_t i = 0; i < rank0.size(); ++i) {
    SCOPED_TRACE(i);
    const Action &got = s.ranks[0][i], &want = rank0[i];
    EXPECT_EQ(got.op, want.op);
    EXPECT_EQ(got.microbatch, want.microbatch);
    EXPECT_EQ(got.vstage, want.vstage);
    EXPECT_EQ(got.peer, want.peer);
    EXPECT_EQ(got.tag, want.tag);
  }
  // Rank 1 (the last stage): receives each activation, sends each gradient.
  const Action& first = s.ranks[1][0];
  EXPECT_EQ(first.op, Op::recv_act);
  EXPECT_EQ(first.vstage, 1);
  EXPECT_EQ(first.peer, 0);
  EXPECT_EQ(first.tag, 0);

  const SimResult r = simulate(s);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(compute_starts(s, r, 0), (std::vector<int>{0, 1, 4, 6, 7, 10}));
  EXPECT_EQ(compute_starts(s, r, 1), (std::vector<int>{1, 2, 4, 5, 7, 8}));
  EXPECT_EQ(r.makespan, 12);
  EXPECT_EQ(r.busy, (std::vector<int>{9, 9}));
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{2, 1}));
}

// GPipe: all forwards, then the backwards in reverse microbatch order.
TEST(GoldenScheduleTest, GpipeTwoRanksTwoMicrobatches) {
  const Schedule s = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  EXPECT_EQ(compute_order(s, 0), "F0 F1 B1 B0");
  EXPECT_EQ(compute_order(s, 1), "F0 F1 B1 B0");
  const SimResult r = simulate(s);
  ASSERT_TRUE(r.ok) << r.error;
  // Rank 1: F0 [1,2) F1 [2,3) B1 [3,5) B0 [5,7); rank 0: B1 [5,7) B0 [7,9).
  EXPECT_EQ(compute_starts(s, r, 0), (std::vector<int>{0, 1, 5, 7}));
  EXPECT_EQ(compute_starts(s, r, 1), (std::vector<int>{1, 2, 3, 5}));
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{2, 2}));
}

// Interleaved pp = 2, v = 2, m = 2: rank r holds stages r and r + 2 (chunks a,
// b). Megatron's order: forwards (0,a) (1,a) (0,b) (1,b), backwards (0,b)
// (1,b) (0,a) (1,a). Warm-up: rank 0 min((2−0−1)·2 + (2−1)·2, 4) = 4 (all
// forwards first), rank 1 (2−1−1)·2 + 2 = 2.
TEST(GoldenScheduleTest, InterleavedTwoRanksTwoChunks) {
  const Schedule s = make_schedule(ScheduleKind::interleaved, 2, 2, 2);
  EXPECT_EQ(compute_order(s, 0), "F0a F1a F0b F1b B0b B1b B0a B1a");
  EXPECT_EQ(compute_order(s, 1), "F0a F1a F0b B0b F1b B1b B0a B1a");
  // Rank 1's chunk a (stage 1) sends its activation to rank 0's chunk b (stage 2).
  const Action& send = s.ranks[1][2];
  EXPECT_EQ(send.op, Op::send_act);
  EXPECT_EQ(send.vstage, 1);
  EXPECT_EQ(send.peer, 0);
  const SimResult r = simulate(s);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.makespan, 3 * (2 * 2 + 2 - 1));
}

struct Case {
  ScheduleKind kind;
  int pp, v, m;
};

std::vector<Case> valid_cases() {
  std::vector<Case> out;
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved}) {
    for (int pp : {1, 2, 3, 4, 8}) {
      for (int v : {1, 2, 3}) {
        for (int m = 1; m <= 16; ++m) {
          if (config_error(kind, pp, v, m, -1) == "(no error)") out.push_back({kind, pp, v, m});
        }
      }
    }
  }
  return out;
}

// Every valid case simulates, and its figures are the theory's:
//  - each rank computes m·v forwards and m·v backwards: busy = 3·m·v;
//  - the makespan is the ideal 3·(v·m + pp − 1), so every rank's bubble is
//    exactly (pp−1)/(v·m + pp − 1): all ranks do the same work, so the bubble
//    of rank 0, of any rank and their average are one number. For gpipe and
//    1f1b (v = 1) that is the papers' (p−1)/(m+p−1); the interleaved schedule
//    reaches its ideal (p−1)/(v·m+p−1) exactly too with these unit costs per
//    chunk (1 and 2 per chunk: its stages are v times shorter, the fraction is
//    the same in real time), strictly below 1f1b's for pp > 1;
//  - peak activation sets in flight: gpipe m on every rank; 1f1b
//    min(pp − s, m) on rank s; interleaved min(w_s + 1, m·v) (microbatch,
//    chunk) pairs, w_s = min((pp−s−1)·2 + (v−1)·pp, m·v) its warm-up.
TEST(ScheduleSweepTest, EveryValidScheduleSimulatesAndMatchesTheTheory) {
  const std::vector<Case> cases = valid_cases();
  EXPECT_EQ(cases.size(), 80u /* gpipe */ + 67u /* 1f1b */ + 70u /* interleaved */);
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(schedule_kind_name(c.kind)) + " pp=" + std::to_string(c.pp) +
                 " v=" + std::to_string(c.v) + " m=" + std::to_string(c.m));
    const Schedule s = make_schedule(c.kind, c.pp, c.v, c.m);
    ASSERT_EQ(static_cast<int>(s.ranks.size()), c.pp);
    const SimResult r = simulate(s);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.makespan, 3 * (c.v * c.m + c.pp - 1));
    for (int rank = 0; rank < c.pp; ++rank) {
      EXPECT_EQ(r.busy[rank], 3 * c.m * c.v);
      // idle = 3(pp−1) over makespan = 3(v·m+pp−1): the theory's ratio exactly (in integers; each
      // double is one correctly rounded division of the same rational, so they are equal).
      EXPECT_EQ(r.makespan - r.busy[rank], 3 * (c.pp - 1));
      EXPECT_EQ(r.bubble[rank], ideal_bubble(c.pp, c.v, c.m));
      int want_peak = 0;
      if (c.kind == ScheduleKind::gpipe) want_peak = c.m;
      if (c.kind == ScheduleKind::one_f_one_b) want_peak = std::min(c.pp - rank, c.m);
      if (c.kind == ScheduleKind::interleaved) {
        const int warmup = std::min((c.pp - rank - 1) * 2 + (c.v - 1) * c.pp, c.m * c.v);
        want_peak = std::min(warmup + 1, c.m * c.v);
      }
      EXPECT_EQ(r.peak_in_flight[rank], want_peak) << "rank " << rank;
    }
    if (c.kind == ScheduleKind::interleaved && c.pp > 1) {
      EXPECT_LT(r.bubble[0], ideal_bubble(c.pp, 1, c.m));
    }
    // Every message names the other side's rank (itself only when pp = 1).
    for (int rank = 0; rank < c.pp; ++rank) {
      for (const Action& a : s.ranks[static_cast<size_t>(rank)]) {
        if (a.op == Op::forward || a.op == Op::backward) continue;
        EXPECT_TRUE(a.peer != rank || c.pp == 1);
      }
    }
    // The grid draws every compute action over its whole duration.
    const std::string grid = render_grid(s, r);
    EXPECT_NE(grid.find("rank " + std::to_string(c.pp - 1)), std::string::npos);
  }
}

TEST(RenderGridTest, OneFOneBTwoRanksThreeMicrobatches) {
  const Schedule s = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 3);
  EXPECT_EQ(
      render_grid(s, simulate(s)),
      "1f1b schedule: pp 2, v 1, 3 microbatches; F = forward (1 time unit), B = backward (2 units), . = "
      "idle\n"
      "time    0  1  2  3  4  5  6  7  8  9  10 11\n"
      "rank 0  F0 F1 .  .  B0 B0 F2 B1 B1 .  B2 B2\n"
      "rank 1  .  F0 B0 B0 F1 B1 B1 F2 B2 B2 .  .\n"
      "\n"
      "makespan 12 time units; bubble = idle / makespan, ideal = (pp-1)/(v*m+pp-1) = 0.2500\n"
      "rank    busy  idle  bubble  ideal   peak activation sets in flight\n"
      "rank 0  9     3     0.2500  0.2500  2\n"
      "rank 1  9     3     0.2500  0.2500  1\n");
}

TEST(RenderGridTest, InterleavedCellsNameTheChunk) {
  const Schedule s = make_schedule(ScheduleKind::interleaved, 2, 2, 2);
  const std::string grid = render_grid(s, simulate(s));
  EXPECT_NE(grid.find("rank 0  F0a F1a F0b F1b .   .   B0b B0b"), std::string::npos) << grid;
}

// The simulator rejects broken lists, naming what is wrong.
class BrokenScheduleTest : public ::testing::Test {
 protected:
  static std::string error_of(const Schedule& s) {
    const SimResult r = simulate(s);
    EXPECT_FALSE(r.ok);
    return r.error;
  }
  static size_t find(const std::vector<Action>& list, Op op, int m) {
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].op == op && list[i].microbatch == m) return i;
    }
    ADD_FAILURE() << "no " << op_name(op) << " of microbatch " << m;
    return 0;
  }
  Schedule s = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
};

TEST_F(BrokenScheduleTest, ReceiveBeforeSendIsADeadlock) {
  // Rank 0 waits for its first gradient before any forward; rank 1 waits for the first activation.
  auto& r0 = s.ranks[0];
  const size_t i = find(r0, Op::recv_grad, 1);
  std::rotate(r0.begin(), r0.begin() + static_cast<long>(i), r0.begin() + static_cast<long>(i) + 1);
  EXPECT_EQ(
      error_of(s),
      "deadlock: no rank can move; rank 0 action 0 (recv_grad m=1 k=0 peer=1 tag=7) waits; rank 1 action 0 "
      "(recv_act m=0 k=1 peer=0 tag=0) waits;");
}

TEST_F(BrokenScheduleTest, ForwardWithoutItsReceive) {
  auto& r1 = s.ranks[1];
  r1.erase(r1.begin() + static_cast<long>(find(r1, Op::recv_act, 1)));
  const std::string e = error_of(s);
  EXPECT_NE(e.find("(forward m=1 k=1): no recv_act of its input before it"), std::string::npos) << e;
}

TEST_F(BrokenScheduleTest, WrongPeerAndWrongTag) {
  s.ranks[0][find(s.ranks[0], Op::send_act, 0)].peer = 0;
  EXPECT_NE(error_of(s).find("the peer must be rank 1"), std::string::npos);
  s = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  s.ranks[1][find(s.ranks[1], Op::recv_act, 1)].tag = 0;
  EXPECT_NE(error_of(s).find("the tag must be 4"), std::string::npos);
}

TEST_F(BrokenScheduleTest, ComputeOnTheWrongRankOrTwice) {
  s.ranks[0][find(s.ranks[0], Op::forward, 1)].vstage = 1;
  EXPECT_NE(error_of(s).find("stage 1 lives on rank 1"), std::string::npos);
  s = make_schedule(ScheduleKind::gpipe, 2, 1, 2);
  auto& r0 = s.ranks[0];
  r0.insert(r0.begin() + 1, Action{Op::forward, 0, 0, -1, -1});
  EXPECT_NE(error_of(s).find("a second forward of this microbatch and stage"), std::string::npos);
}

TEST_F(BrokenScheduleTest, MissingBackward) {
  auto& r0 = s.ranks[0];
  r0.erase(r0.begin() + static_cast<long>(find(r0, Op::backward, 0)));
  EXPECT_EQ(error_of(s), "no backward of microbatch 0 on stage 0 (rank 0)");
}

// Tag matching would pair these messages correctly; FIFO matching would not:
// rank 0 posts microbatch 1's activation before microbatch 0's.
TEST_F(BrokenScheduleTest, SendsOutOfTheReceiversOrder) {
  auto& r0 = s.ranks[0];
  const Action send0 = r0[find(r0, Op::send_act, 0)];
  r0.erase(r0.begin() + static_cast<long>(find(r0, Op::send_act, 0)));
  r0.insert(r0.begin() + static_cast<long>(find(r0, Op::send_act, 1)) + 1, send0);
  EXPECT_EQ(error_of(s),
            "rank 0 posts its activation sends to rank 1 in another order than rank 1 receives them: send #0 "
            "is tag 4 (m=1 k=0), receive #0 expects tag 0 (m=0 k=0)");
}

}  // namespace
}  // namespace mt::pp

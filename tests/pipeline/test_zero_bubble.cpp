// The zero-bubble schedule (zbh1): every (pp, m) of the brief simulated at
// F = B = W = 1 against the bubble derived by hand in docs/PARALLELISM.md
// ("Pipeline parallelism"), its memory against 1F1B's, the old kinds' bubble
// at F = 1, B = 2 unchanged, and the simulator catching a broken W order.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pipeline/render.h"
#include "pipeline/schedule.h"
#include "pipeline/simulate.h"

namespace mt::pp {
namespace {

// Written out here, not read from schedule_bubble: each rank computes 3m
// units (F + B + W per microbatch) and idles pp − 1 of a makespan of
// 3m + pp − 1 — the last stage starts pp − 1 forwards late, and the first
// stage's last B waits for pp − 1 B's down the pipeline, the deferred W's
// filling every other wait (docs/PARALLELISM.md derives it).
double zbh1_bubble(int pp, int m) {
  return static_cast<double>(pp - 1) / static_cast<double>(3 * m + pp - 1);
}

TEST(ZeroBubbleTest, Zbh1BubbleIsTheDerivedFormulaAtPp248AndM4816) {
  for (int pp : {2, 4, 8}) {
    for (int m : {4, 8, 16}) {
      if (m < pp) continue;  // zbh1 needs m >= pp, as 1f1b does
      const Schedule s = make_schedule(ScheduleKind::zbh1, pp, 1, m);
      const SimResult r = simulate(s);
      ASSERT_TRUE(r.ok) << r.error;
      EXPECT_EQ(r.costs.forward, 1);
      EXPECT_EQ(r.costs.backward, 1);
      EXPECT_EQ(r.costs.weight, 1);
      EXPECT_EQ(r.makespan, 3 * m + pp - 1) << "pp " << pp << " m " << m;
      for (int rank = 0; rank < pp; ++rank) {
        EXPECT_EQ(r.busy[static_cast<size_t>(rank)], 3 * m);
        EXPECT_DOUBLE_EQ(r.bubble[static_cast<size_t>(rank)], zbh1_bubble(pp, m))
            << "pp " << pp << " m " << m << " rank " << rank;
        // 1F1B's memory: at most pp activation sets on any rank (1f1b's stage 0).
        EXPECT_LE(r.peak_in_flight[static_cast<size_t>(rank)], pp);
        // Rank s defers each W by s microbatches: s + 1 output-gradient sets kept right after a B.
        EXPECT_EQ(r.peak_deferred[static_cast<size_t>(rank)], rank + 1);
      }
      EXPECT_DOUBLE_EQ(schedule_bubble(ScheduleKind::zbh1, pp, 1, m), zbh1_bubble(pp, m));
    }
  }
}

// The same grid for the old kinds at their costs (F = 1, B = 2): the
// bubble (pp − 1)/(v·m + pp − 1), against which zbh1 is a third at large m.
TEST(ZeroBubbleTest, OldKindsKeepTheirBubbleAndZbh1IsSmaller) {
  for (int pp : {2, 4, 8}) {
    for (int m : {8, 16}) {
      if (m < pp) continue;
      const Schedule one = make_schedule(ScheduleKind::one_f_one_b, pp, 1, m);
      const SimResult r1 = simulate(one);
      ASSERT_TRUE(r1.ok) << r1.error;
      EXPECT_EQ(r1.costs.backward, 2);
      const double b1 = static_cast<double>(pp - 1) / static_cast<double>(m + pp - 1);
      EXPECT_DOUBLE_EQ(r1.bubble[0], b1);
      EXPECT_LT(zbh1_bubble(pp, m), b1);
      const Schedule il = make_schedule(ScheduleKind::interleaved, pp, 2, m);
      const SimResult ri = simulate(il);
      ASSERT_TRUE(ri.ok) << ri.error;
      EXPECT_DOUBLE_EQ(ri.bubble[0], static_cast<double>(pp - 1) / static_cast<double>(2 * m + pp - 1));
    }
  }
}

// The hand-worked pp 2, m 4 timeline (docs/PARALLELISM.md draws it).
TEST(ZeroBubbleTest, Pp2M4OrderAndGrid) {
  const Schedule s = make_schedule(ScheduleKind::zbh1, 2, 1, 4);
  auto order = [&](int rank) {
    std::string out;
    for (const Action& a : s.ranks[static_cast<size_t>(rank)]) {
      if (a.op != Op::forward && a.op != Op::backward && a.op != Op::weight) continue;
      if (!out.empty()) out += ' ';
      out += a.op == Op::forward ? 'F' : a.op == Op::weight ? 'W' : 'B';
      out += std::to_string(a.microbatch);
    }
    return out;
  };
  EXPECT_EQ(order(0), "F0 F1 B0 W0 F2 B1 W1 F3 B2 W2 B3 W3");
  EXPECT_EQ(order(1), "F0 B0 F1 B1 W0 F2 B2 W1 F3 B3 W2 W3");
  const std::string grid = render_grid(s, simulate(s));
  EXPECT_NE(grid.find("W = weight gradients (1 unit)"), std::string::npos) << grid;
  EXPECT_NE(grid.find("ideal = (pp-1)/(3m+pp-1) = 0.0769"), std::string::npos) << grid;
}

// A W moved before its B, a W dropped, and a W in a fused schedule: each caught.
TEST(ZeroBubbleTest, SimulatorCatchesBrokenWeightActions) {
  Schedule s = make_schedule(ScheduleKind::zbh1, 2, 1, 4);
  auto& r1 = s.ranks[1];
  const auto w0 = std::find_if(r1.begin(), r1.end(), [](const Action& a) { return a.op == Op::weight; });
  Action w = *w0;
  r1.erase(w0);
  Schedule early = s;
  early.ranks[1].insert(early.ranks[1].begin(), w);
  EXPECT_NE(simulate(early).error.find("before the B of this microbatch and stage"), std::string::npos)
      << simulate(early).error;
  EXPECT_NE(simulate(s).error.find("no W of microbatch 0 on stage 1"), std::string::npos)
      << simulate(s).error;
  Schedule fused = make_schedule(ScheduleKind::one_f_one_b, 2, 1, 4);
  fused.ranks[0].push_back({Op::weight, 0, 0, -1, -1});
  EXPECT_NE(simulate(fused).error.find("a W in a schedule that does not split"), std::string::npos);
}

}  // namespace
}  // namespace mt::pp

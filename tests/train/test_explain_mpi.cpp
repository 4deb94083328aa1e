// explain_report on a real job: rank 0 gets every rank's lines in rank order,
// the other ranks nothing, and the report's own messages stay out of the step.
#include <gtest/gtest.h>

#include <string>

#include "comm/context.h"
#include "comm/mpi_test.h"
#include "train/explain.h"

namespace mt {
namespace {

using test::world;

// Restores the context's step after a test that sets it.
class ExplainReport : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = world().context().step; }
  void TearDown() override { world().context().step = saved_; }
  int64_t saved_ = -1;
};

// Rank r's entries of `step`: r·150 + 1 fake ones (rank 2's text is ~12 KB),
// then the real all-reduce of record_step.
CommLedger fake_ledger(int r, int64_t step, const std::string& world_axis) {
  CommLedger ledger;
  for (int i = 0; i < r * 150 + 1; ++i) {
    std::string label = "fake " + std::to_string(i) + " of rank " + std::to_string(r) + (i % 2 ? "x" : "");
    ledger.record(LedgerEntry{"all_gather", "dp", std::move(label), i, 4 * i, 0.0, step});
  }
  ledger.record(LedgerEntry{"all_reduce", world_axis, "explain test: sum [1, 3]", 3, 12, 0.0, step});
  return ledger;
}

void record_step(int64_t step) {
  Group& w = world();
  CommContext& ctx = w.context();
  ctx.step = step;
  const CommLedger fake = fake_ledger(w.rank(), step, w.axis());
  for (size_t i = 0; i + 1 < fake.entries().size(); ++i)
    ctx.ledger.record(fake.entries()[i]);
  float v[3] = {1, 2, 3};
  w.all_reduce(v, 3, "explain test: sum [1, 3]");
}

TEST_F(ExplainReport, RankZeroGetsEveryRanksLinesInRankOrder) {
  Group& w = world();
  const int64_t step = 1001;
  record_step(step);
  const std::string mine = explain_lines(w.context().ledger, step, w.rank());
  EXPECT_EQ(mine, explain_lines(fake_ledger(w.rank(), step, w.axis()), step, w.rank()));
  const size_t entries_before = w.context().ledger.step_entries(step).size();

  const std::string report = explain_report(w, step);

  EXPECT_EQ(w.context().step, step);                                        // restored
  EXPECT_EQ(w.context().ledger.step_entries(step).size(), entries_before);  // nothing added to the step
  if (w.rank() != 0) {
    EXPECT_EQ(report, "");
    return;
  }
  // The other ranks' lines are a pure function of their rank: rank 0 rebuilds them.
  std::string want;
  bool ragged = false;  // a text whose length is not a multiple of the 4-byte words it travels in
  for (int r = 0; r < w.size(); ++r) {
    const std::string lines = explain_lines(fake_ledger(r, step, w.axis()), step, r);
    ragged = ragged || (r > 0 && lines.size() % 4 != 0);
    want += lines;
  }
  EXPECT_TRUE(ragged || w.size() == 1);
  EXPECT_EQ(report.size(), want.size());
  EXPECT_TRUE(report == want) << report.substr(0, 2000);
  EXPECT_NE(report.find("rank " + std::to_string(w.size() - 1) + " | " + w.axis() +
                        " | all_reduce     | [1, 3] | 3 elements | explain test: sum\n"),
            std::string::npos);
}

TEST_F(ExplainReport, AStepWithNoEntriesGivesOnlyHeaders) {
  Group& w = world();
  const std::string report = explain_report(w, 424242);
  if (w.rank() != 0) {
    EXPECT_EQ(report, "");
    return;
  }
  std::string want;
  for (int r = 0; r < w.size(); ++r)
    want += "rank " + std::to_string(r) + ": 0 collectives in step 424242\n";
  EXPECT_EQ(report, want);
}

}  // namespace
}  // namespace mt

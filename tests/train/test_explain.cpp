// explain_lines: one line per ledger entry of a step, the shape taken from the
// end of the label when the tp layers put one there.
#include <gtest/gtest.h>

#include <string>

#include "comm/context.h"
#include "train/explain.h"

namespace mt {
namespace {

LedgerEntry entry(std::string op, std::string axis, std::string label, int64_t elements, int64_t step) {
  LedgerEntry e;
  e.op = std::move(op);
  e.axis = std::move(axis);
  e.label = std::move(label);
  e.elements = elements;
  e.bytes = 4 * elements;
  e.step = step;
  return e;
}

TEST(Explain, OneLinePerEntryOfTheStepInCallOrder) {
  CommLedger ledger;
  ledger.record(entry("all_gather", "dp", "layer 0 params", 24, 0));
  ledger.record(entry("all_reduce", "tp", "layer 0 attn o: reduce_from_tp forward [8, 64]", 512, 0));
  ledger.record(entry("all_reduce", "dp", "loss", 1, 1));  // another step: left out
  ledger.record(entry("reduce_scatter", "dp", "layer 0 grads", 48, 0));
  ledger.record(entry("all_gather", "tp", "layer 1 mlp up: gather_from_sp forward [4, 16]", 64, 0));
  EXPECT_EQ(
      explain_lines(ledger, 0, 3),
      "rank 3: 4 collectives in step 0\n"
      "rank 3 | dp | all_gather     | [24] | 24 elements | layer 0 params\n"
      "rank 3 | tp | all_reduce     | [8, 64] | 512 elements | layer 0 attn o: reduce_from_tp forward\n"
      "rank 3 | dp | reduce_scatter | [48] | 48 elements | layer 0 grads\n"
      "rank 3 | tp | all_gather     | [4, 16] | 64 elements | layer 1 mlp up: gather_from_sp forward\n");
  EXPECT_EQ(explain_lines(ledger, 1, 0),
            "rank 0: 1 collectives in step 1\n"
            "rank 0 | dp | all_reduce     | [1] | 1 element | loss\n");
}

TEST(Explain, OnlyATrailingListOfNumbersIsAShape) {
  CommLedger ledger;
  ledger.record(entry("all_reduce", "tp", "site [x]", 4, 2));
  ledger.record(entry("all_reduce", "tp", "site []", 4, 2));
  ledger.record(entry("all_reduce", "tp", "[2] in the middle, not at the end", 4, 2));
  ledger.record(entry("all_reduce", "tp", "site [1, 4]", 4, 2));
  ledger.record(entry("all_reduce", "tp", "[1,4]", 4, 2));
  EXPECT_EQ(explain_lines(ledger, 2, 1),
            "rank 1: 5 collectives in step 2\n"
            "rank 1 | tp | all_reduce     | [4] | 4 elements | site [x]\n"
            "rank 1 | tp | all_reduce     | [4] | 4 elements | site []\n"
            "rank 1 | tp | all_reduce     | [4] | 4 elements | [2] in the middle, not at the end\n"
            "rank 1 | tp | all_reduce     | [1, 4] | 4 elements | site\n"
            "rank 1 | tp | all_reduce     | [1,4] | 4 elements | \n");
}

TEST(Explain, AStepWithoutCollectivesHasOnlyTheHeader) {
  CommLedger ledger;
  ledger.record(entry("all_reduce", "dp", "loss", 1, 0));
  EXPECT_EQ(explain_lines(ledger, 7, 2), "rank 2: 0 collectives in step 7\n");
}

}  // namespace
}  // namespace mt

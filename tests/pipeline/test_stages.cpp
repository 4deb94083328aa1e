// parallel.stage_layers: every entry a count between 1 and n_layers, every
// comma between two entries, the sum n_layers (issue 24, item 17).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "pipeline/stages.h"

namespace mt::pp {
namespace {

using ::testing::HasSubstr;

void expect_refused(const std::string& layers, const std::string& want) {
  try {
    stage_layer_counts(4, 2, 1, layers);
    ADD_FAILURE() << "'" << layers << "' accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr(want)) << layers;
  }
}

TEST(StageLayers, ExplicitCounts) {
  EXPECT_EQ(stage_layer_counts(4, 2, 1, "3,1"), (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(stage_layer_counts(4, 2, 1, ""), (std::vector<int64_t>{2, 2}));
  expect_refused("99999999999999999999,1", "'99999999999999999999' is not a layer count between 1 and");
  expect_refused("9223372036854775807,1", "'9223372036854775807' is not a layer count between 1 and");
  expect_refused("5,1", "'5' is not a layer count between 1 and model.n_layers (4)");
  expect_refused("3,1,", "'' is not a layer count");
  expect_refused(",3,1", "'' is not a layer count");
  expect_refused("3,,1", "'' is not a layer count");
  expect_refused("3,0", "'0' is not a layer count");
  expect_refused("2,1", "sums to 3 layers but model.n_layers is 4");
  expect_refused("1,1,2", "has 3 entries but parallel.pp (2)");
}

}  // namespace
}  // namespace mt::pp

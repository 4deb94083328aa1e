// --trace-steps' grammar (train/trace.h) and the span recorder (core/trace_spans.h).
#include <gtest/gtest.h>

#include <set>

#include "core/error.h"
#include "core/trace_spans.h"
#include "train/trace.h"

namespace mt {
namespace {

TEST(TraceSteps, ListsAndRanges) {
  EXPECT_EQ(parse_trace_steps("", 10), (std::set<int64_t>{9}));  // default: the last step
  EXPECT_EQ(parse_trace_steps("3", 10), (std::set<int64_t>{3}));
  EXPECT_EQ(parse_trace_steps("2-4", 10), (std::set<int64_t>{2, 3, 4}));
  EXPECT_EQ(parse_trace_steps("2,5", 10), (std::set<int64_t>{2, 5}));
  EXPECT_EQ(parse_trace_steps("0,3-4,4", 10), (std::set<int64_t>{0, 3, 4}));
}

TEST(TraceSteps, RefusesWithTheValue) {
  for (const char* bad : {"x", "2-", "-1", "3,", "1-2-3", "4-2", "10", "1.5"}) {
    try {
      parse_trace_steps(bad, 10);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("--trace-steps '") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

TEST(SpanRecorder, RecordsOnlyWhileActive) {
  SpanRecorder::take_spans();
  SpanRecorder::take_memory();
  { const TraceScope off("phase", "off"); }
  SpanRecorder::set_active(true);
  {
    const TraceScope outer("phase", "outer");
    const TraceScope inner("layer", "forward L", 3);
  }
  SpanRecorder::set_active(false);
  const std::vector<TraceSpan> spans = SpanRecorder::take_spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "forward L3");  // the inner scope ends first
  EXPECT_EQ(spans[1].name, "outer");
  EXPECT_LE(spans[1].start_s, spans[0].start_s);
  EXPECT_GE(spans[1].end_s, spans[0].end_s);
  EXPECT_TRUE(spans[0].main_thread);
  EXPECT_EQ(SpanRecorder::take_memory().size(), 2u);  // a sample at each span's end
}

}  // namespace
}  // namespace mt

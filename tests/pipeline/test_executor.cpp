// The executor against a fake stage that records what it is asked to do: the
// order of forwards, backwards and the store protocol, the slots, the loss
// scaling. One process: schedules without transfers (pp = 1).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "pipeline/executor.h"

namespace mt::pp {
namespace {

class FakeStage : public Stage {
 public:
  std::vector<std::string> log;
  std::vector<float> dlosses;
  int64_t numel = 0;

  double forward_slot(int slot, const int32_t* inputs, const int32_t* targets, int64_t B,
                      int64_t T) override {
    note("F", inputs[0], "@", slot);
    EXPECT_EQ(targets[0], inputs[0] + 100);
    return static_cast<double>(B * T) * (inputs[0] + 1);  // a loss sum that names the microbatch
  }
  void backward_slot(int slot, float dloss) override {
    note("B", "@", slot);
    dlosses.push_back(dloss);
  }
  float* stage_input(int) override { return buf_.data(); }
  const float* stage_output(int) override { return buf_.data(); }
  float* output_grad() override { return buf_.data(); }
  const float* input_grad() const override { return buf_.data(); }
  int64_t residual_numel(int64_t B, int64_t T) const override { return B * T; }
  void begin_step(int64_t m) override { note("begin_step ", m); }
  void begin_microbatch(int64_t i, int64_t) override { note("mb ", i); }
  void finish_grads() override { log.push_back("finish"); }

 private:
  template <typename... A>
  void note(const A&... parts) {
    std::ostringstream os;
    (os << ... << parts);
    log.push_back(os.str());
  }
  std::vector<float> buf_ = std::vector<float>(64);
};

// Microbatch m of mb × T tokens: every input token is m, every target m + 100.
void fill(std::vector<int32_t>& in, std::vector<int32_t>& tg, int m, int64_t mb, int64_t T) {
  in.resize(static_cast<size_t>(m * mb * T));
  tg.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = static_cast<int32_t>(i / static_cast<size_t>(mb * T));
    tg[i] = in[i] + 100;
  }
}

TEST(Executor, OneStageRunsEachForwardThenItsBackward) {
  FakeStage st;
  Executor ex(one_stage_schedule(3), 0, nullptr, {&st}, 2, 4);
  std::vector<int32_t> in, tg;
  fill(in, tg, 3, 2, 4);
  const double loss = ex.run(in.data(), tg.data(), 5);
  const std::vector<std::string> want = {"begin_step 3", "F0@0", "mb 0", "B@0", "F1@0",  "mb 1",
                                         "B@0",          "F2@0", "mb 2", "B@0", "finish"};
  EXPECT_EQ(st.log, want);
  EXPECT_DOUBLE_EQ(loss, 8.0 * (1 + 2 + 3));
  ASSERT_EQ(st.dlosses.size(), 3u);
  for (float d : st.dlosses)
    EXPECT_EQ(d, static_cast<float>(1.0 / 5.0));
  EXPECT_EQ(ex.spans().size(), 6u);
  EXPECT_EQ(ex.spans()[0].name, "F0");
  EXPECT_EQ(ex.spans()[1].name, "B0");
}

// GPipe on one stage runs every forward first, so microbatches hold separate
// slots, and the backwards come in reverse order: begin_microbatch counts
// backwards (0, 1, 2), whatever microbatch each is, so the store sees the
// last backward as index microbatches − 1.
TEST(Executor, BeginMicrobatchCountsBackwardsNotMicrobatches) {
  FakeStage st;
  Executor ex(make_schedule(ScheduleKind::gpipe, 1, 1, 3), 0, nullptr, {&st}, 1, 2);
  std::vector<int32_t> in, tg;
  fill(in, tg, 3, 1, 2);
  ex.run(in.data(), tg.data(), 1);
  const std::vector<std::string> want = {"begin_step 3", "F0@0", "F1@1", "F2@2", "mb 0",  "B@2",
                                         "mb 1",         "B@1",  "mb 2", "B@0",  "finish"};
  EXPECT_EQ(st.log, want);
}

TEST(Executor, NoValidTokensRunsNothingButTheStoreProtocol) {
  FakeStage st;
  Executor ex(one_stage_schedule(2), 0, nullptr, {&st}, 1, 2);
  std::vector<int32_t> in, tg;
  fill(in, tg, 2, 1, 2);
  EXPECT_EQ(ex.run(in.data(), tg.data(), 0), 0.0);
  const std::vector<std::string> want = {"begin_step 2", "finish"};
  EXPECT_EQ(st.log, want);
}

TEST(Executor, ForwardLossOfOneStageIsItsForwardInSlotZero) {
  FakeStage st;
  Executor ex(one_stage_schedule(1), 0, nullptr, {&st}, 1, 2);
  std::vector<int32_t> in, tg;
  fill(in, tg, 1, 3, 2);
  EXPECT_DOUBLE_EQ(ex.forward_loss(in.data(), tg.data(), 3, 2), 6.0);
  const std::vector<std::string> want = {"F0@0"};
  EXPECT_EQ(st.log, want);
}

}  // namespace
}  // namespace mt::pp

// The executor's transfer plan (pipeline/executor.h Executor::transfer_plan)
// against the tracked allocator, on pp = world size ranks: one step of each
// schedule is run with stages that do no compute, and the growth of the
// tracker's comm peak over the step must be the plan's posted receives plus
// between its least and most gradient send buffers, each one residual. The
// plan is also held to a count by hand from the schedules: a rank posts
// min(2, its receives) buffers, the first stage (no gradient to send) no send
// buffer, every other stage one send buffer at least and one per microbatch
// at most. The memory model reads the same plan (cost/memory_model.cpp
// add_pipeline).
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "comm/mpi_test.h"
#include "core/memory.h"
#include "pipeline/executor.h"

namespace mt::pp {
namespace {

using test::world;

constexpr int64_t kMb = 2, kT = 8, kMicrobatches = 4;

// A stage without compute: its transfers read and write one residual buffer.
class QuietStage : public Stage {
 public:
  double forward_slot(int, const int32_t*, const int32_t*, int64_t, int64_t) override { return 0; }
  void backward_slot(int, float) override {}
  float* stage_input(int) override { return buf_.data(); }
  const float* stage_output(int) override { return buf_.data(); }
  float* output_grad() override { return buf_.data(); }
  const float* input_grad() const override { return buf_.data(); }
  int64_t residual_numel(int64_t B, int64_t T) const override { return B * T; }
  void begin_step(int64_t) override {}
  void begin_microbatch(int64_t, int64_t) override {}
  void finish_grads() override {}

 private:
  std::vector<float> buf_ = std::vector<float>(kMb * kT, 1.0f);
};

int64_t comm(const MemStats& s, bool peak) {
  return (peak ? s.peak : s.current)[static_cast<size_t>(MemKind::comm)];
}

TEST(ExecutorTransfers, EachStepsCommPeakIsTheTransferPlans) {
  const int P = world().size(), r = world().rank();
  Group pp = world().split(0, r, "pp");
  const int64_t n = kMb * kT;
  for (const ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    const Schedule s = make_schedule(kind, P, 1, static_cast<int>(kMicrobatches));
    const Executor::TransferPlan t = Executor::transfer_plan(s.ranks[static_cast<size_t>(r)]);
    EXPECT_EQ(t.recvs, 2);  // every rank receives kMicrobatches ≥ 2 activations or gradients
    EXPECT_EQ(t.least_sends, r == 0 ? 0 : 1);
    EXPECT_EQ(t.most_sends, r == 0 ? 0 : kMicrobatches);
    std::vector<int32_t> tokens(static_cast<size_t>(kMicrobatches * n), 1);
    QuietStage stage;
    const MemStats before = MemoryTracker::stats();
    MemoryTracker::reset_peaks();
    {
      Executor ex(s, r, &pp, {&stage}, kMb, kT);
      ex.run(tokens.data(), tokens.data(), kMicrobatches * n);
      const int64_t grown = (comm(MemoryTracker::stats(), true) - comm(before, false)) / 4;
      EXPECT_GE(grown, (t.recvs + t.least_sends) * n) << "rank " << r;
      EXPECT_LE(grown, (t.recvs + t.most_sends) * n) << "rank " << r;
    }
    EXPECT_EQ(comm(MemoryTracker::stats(), false), comm(before, false));  // all freed with the executor
  }
}

}  // namespace
}  // namespace mt::pp

// optim/optimizer.h optimizer_state_count, the one statement of how many state
// tensors an optimizer keeps (read by the Optimizer's constructor and by the
// memory model), against what the constructor allocates: the growth of the
// tracked optim bytes over the construction must be count × n floats, and the
// count must be the hand count from torch's optimizers (Adam/AdamW's exp_avg
// and exp_avg_sq, LAMB the same two moments, SGD's momentum_buffer only with
// momentum).
#include <gtest/gtest.h>

#include <vector>

#include "core/memory.h"
#include "optim/optimizer.h"

namespace mt {
namespace {

struct Case {
  OptimizerKind kind;
  double momentum;
  int by_hand;
};

int64_t optim_bytes() {
  return MemoryTracker::stats().current[static_cast<size_t>(MemKind::optim)];
}

TEST(OptimizerStates, TheCountIsWhatTheConstructorAllocates) {
  const int64_t n = 1000;
  for (const Case& c : {Case{OptimizerKind::adamw, 0.0, 2}, Case{OptimizerKind::lamb, 0.0, 2},
                        Case{OptimizerKind::sgd, 0.0, 0}, Case{OptimizerKind::sgd, 0.9, 1}}) {
    EXPECT_EQ(optimizer_state_count(c.kind, c.momentum), c.by_hand);
    OptimizerOptions o;
    o.kind = c.kind;
    o.momentum = c.momentum;
    const int64_t before = optim_bytes();
    const Optimizer opt(n, o, {{0, n, true}}, {{0, n, 0, true}}, 1);
    EXPECT_EQ(opt.state_count(), optimizer_state_count(c.kind, c.momentum));
    EXPECT_EQ(optim_bytes() - before, optimizer_state_count(c.kind, c.momentum) * n * 4);
  }
}

}  // namespace
}  // namespace mt

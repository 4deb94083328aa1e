#include <gtest/gtest.h>

#include "core/memory.h"
#include "core/philox.h"
#include "core/tensor.h"

namespace mt {
namespace {

TEST(Philox, KnownAnswerFromRandom123) {
  // Known-answer vectors of Philox4x32-10 published with Random123 (kat_vectors).
  PhiloxCounter zero = philox4x32({0, 0, 0, 0}, {0, 0});
  EXPECT_EQ(zero, (PhiloxCounter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  PhiloxCounter ones =
      philox4x32({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu});
  EXPECT_EQ(ones, (PhiloxCounter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  PhiloxCounter pi =
      philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u});
  EXPECT_EQ(pi, (PhiloxCounter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, ShardEqualsSliceOfFullTensor) {
  const PhiloxKey key = philox_key(1234, "model.layers.0.mlp.up_proj.weight");
  std::vector<float> full(1000), shard(300);
  fill_normal(full.data(), 1000, key, 0, 0.02f);
  fill_normal(shard.data(), 300, key, 450, 0.02f);
  for (int i = 0; i < 300; ++i)
    EXPECT_EQ(shard[i], full[450 + i]);
}

TEST(Philox, NormalMoments) {
  const PhiloxKey key = philox_key(7, "w");
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double x = philox_normal(key, i);
    s += x;
    s2 += x * x;
  }
  // Statistical, not a rounding bound (the draws are the same bits on every
  // host, summed in one order): 0.01 is 4.5 standard errors of the mean
  // (1/√n) and 3.2 of the second moment (√(2/n)).
  EXPECT_NEAR(s / n, 0.0, 0.01);
  EXPECT_NEAR(s2 / n, 1.0, 0.01);
  EXPECT_NE(philox_key(7, "w"), philox_key(8, "w"));
  EXPECT_NE(philox_key(7, "w"), philox_key(7, "v"));
}

TEST(Memory, CountsCurrentAndPeakPerCategory) {
  const MemStats before = MemoryTracker::stats();
  const int g = static_cast<int>(MemKind::grad);
  {
    Tensor a({10, 10}, MemKind::grad);
    {
      Tensor b({5}, MemKind::grad);
      EXPECT_EQ(MemoryTracker::stats().current[g] - before.current[g], 420);
    }
    EXPECT_EQ(MemoryTracker::stats().current[g] - before.current[g], 400);
    EXPECT_GE(MemoryTracker::stats().peak[g], before.current[g] + 420);
    EXPECT_EQ(a.numel(), 100);
    EXPECT_EQ(a.data()[99], 0.0f);
  }
  EXPECT_EQ(MemoryTracker::stats().current[g], before.current[g]);
}

}  // namespace
}  // namespace mt

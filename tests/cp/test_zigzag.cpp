// The zigzag layout: T tokens in 2·cp chunks, rank r holding chunks r and
// 2·cp−1−r, written out by hand for T = 16; slicing and its inverse; the
// start-up rule on T.
#include <gtest/gtest.h>

#include <numeric>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/context_parallel.h"

namespace mt {
namespace {

std::vector<int32_t> positions(int64_t T, int cp, int rank) {
  std::vector<int32_t> pos(static_cast<size_t>(T / cp));
  cp::zigzag_positions(pos.data(), T, cp, rank);
  return pos;
}

TEST(Zigzag, PositionsT16Cp2) {
  // 4 chunks of 4: rank 0 chunks 0 and 3, rank 1 chunks 1 and 2.
  EXPECT_EQ(positions(16, 2, 0), (std::vector<int32_t>{0, 1, 2, 3, 12, 13, 14, 15}));
  EXPECT_EQ(positions(16, 2, 1), (std::vector<int32_t>{4, 5, 6, 7, 8, 9, 10, 11}));
}

TEST(Zigzag, PositionsT16Cp4) {
  // 8 chunks of 2: rank r chunks r and 7 − r.
  EXPECT_EQ(positions(16, 4, 0), (std::vector<int32_t>{0, 1, 14, 15}));
  EXPECT_EQ(positions(16, 4, 1), (std::vector<int32_t>{2, 3, 12, 13}));
  EXPECT_EQ(positions(16, 4, 2), (std::vector<int32_t>{4, 5, 10, 11}));
  EXPECT_EQ(positions(16, 4, 3), (std::vector<int32_t>{6, 7, 8, 9}));
}

TEST(Zigzag, PositionsOneTokenPerChunk) {
  EXPECT_EQ(positions(4, 2, 0), (std::vector<int32_t>{0, 3}));
  EXPECT_EQ(positions(4, 2, 1), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(positions(2, 1, 0), (std::vector<int32_t>{0, 1}));
}

TEST(Zigzag, CausalWorkIsBalanced) {
  // Σ over a rank's queries of the keys each sees (pos + 1) is the same on every rank.
  for (int cp : {2, 4, 8}) {
    const int64_t T = 8 * cp;
    int64_t first = -1;
    for (int r = 0; r < cp; ++r) {
      int64_t work = 0;
      for (int32_t p : positions(T, cp, r))
        work += p + 1;
      if (r == 0) first = work;
      EXPECT_EQ(work, first) << "cp " << cp << " rank " << r;
    }
  }
}

TEST(Zigzag, SliceTakesThisRanksRowsAndUnsliceRestoresThem) {
  const int64_t B = 2, T = 16, W = 3;
  const int cp = 4;
  std::vector<float> full(static_cast<size_t>(B * T * W));
  std::iota(full.begin(), full.end(), 0.0f);  // value = (b·T + t)·W + c
  std::vector<float> back(full.size(), -1.0f);
  for (int r = 0; r < cp; ++r) {
    std::vector<float> mine(static_cast<size_t>(B * T / cp * W));
    cp::zigzag_slice(mine.data(), full.data(), B, T, W, cp, r);
    const std::vector<int32_t> pos = positions(T, cp, r);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < T / cp; ++i)
        for (int64_t c = 0; c < W; ++c)
          EXPECT_EQ(mine[static_cast<size_t>((b * T / cp + i) * W + c)],
                    static_cast<float>((b * T + pos[static_cast<size_t>(i)]) * W + c));
    cp::zigzag_unslice(back.data(), mine.data(), B, T, W, cp, r);
  }
  EXPECT_EQ(back, full);

  // Token ids (int32) take the same rows: rank 1 of cp 2 on T = 8 holds 2, 3, 4, 5.
  const std::vector<int32_t> ids = {10, 11, 12, 13, 14, 15, 16, 17};
  std::vector<int32_t> got(4);
  cp::zigzag_slice(got.data(), ids.data(), 1, 8, 1, 2, 1);
  EXPECT_EQ(got, (std::vector<int32_t>{12, 13, 14, 15}));
  std::vector<int32_t> restored(8, 0);
  cp::zigzag_unslice(restored.data(), got.data(), 1, 8, 1, 2, 1);
  EXPECT_EQ(restored, (std::vector<int32_t>{0, 0, 12, 13, 14, 15, 0, 0}));
}

TEST(Zigzag, SeqLenMustBeDivisibleByTwiceCp) {
  try {
    cp::check_zigzag(10, 4);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.seq_len (10) must be divisible by 2 x parallel.cp (4) = 8"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cp::check_zigzag(6, 2), ConfigError);  // divisible by cp, not by 2·cp
  EXPECT_THROW(cp::check_zigzag(0, 2), ConfigError);
  EXPECT_NO_THROW(cp::check_zigzag(8, 4));
  std::vector<int32_t> pos(5);
  EXPECT_THROW(cp::zigzag_positions(pos.data(), 10, 2, 0), ConfigError);
  EXPECT_THROW(cp::zigzag_positions(pos.data(), 8, 2, 2), ConfigError);  // rank out of range
}

}  // namespace
}  // namespace mt

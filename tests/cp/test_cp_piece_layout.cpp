// The canonical mode's piece layout (parallel/cp_canonical.h): T tokens in
// 2·C zigzag chunks, piece p = chunks {p, 2C−1−p}, rank r of P holding pieces
// [r·C/P, (r+1)·C/P) in piece order; written out by hand for T = 16, C = 4
// (chunks of 2), and the rule that at P = C it is the zigzag itself.
#include <gtest/gtest.h>

#include <vector>

#include "core/error.h"
#include "parallel/context_parallel.h"
#include "parallel/cp_canonical.h"

namespace mt {
namespace {

std::vector<int32_t> pieces(int64_t T, int C, int P, int rank) {
  std::vector<int32_t> pos(static_cast<size_t>(T / P));
  cp::piece_positions(pos.data(), T, C, P, rank);
  return pos;
}

TEST(CpPieces, OneProcessHoldsEveryPieceInPieceOrder) {
  // pieces 0 (chunks 0, 7), 1 (1, 6), 2 (2, 5), 3 (3, 4)
  EXPECT_EQ(pieces(16, 4, 1, 0),
            (std::vector<int32_t>{0, 1, 14, 15, 2, 3, 12, 13, 4, 5, 10, 11, 6, 7, 8, 9}));
}

TEST(CpPieces, TwoRanksHoldAlignedBlocksOfPieces) {
  // Rank 0 pieces 0 and 1; rank 1 pieces 2 and 3 (the zigzag of cp 2 holds the same tokens
  // as 0..3, 12..15: another order).
  EXPECT_EQ(pieces(16, 4, 2, 0), (std::vector<int32_t>{0, 1, 14, 15, 2, 3, 12, 13}));
  EXPECT_EQ(pieces(16, 4, 2, 1), (std::vector<int32_t>{4, 5, 10, 11, 6, 7, 8, 9}));
}

TEST(CpPieces, AtCpEqualToTheGrainItIsTheZigzag) {
  for (int r = 0; r < 4; ++r) {
    std::vector<int32_t> zig(4);
    cp::zigzag_positions(zig.data(), 16, 4, r);
    EXPECT_EQ(pieces(16, 4, 4, r), zig) << "rank " << r;
  }
}

TEST(CpPieces, SliceFollowsThePositions) {
  std::vector<int32_t> in(32), out(8);  // two sequences of 16, token value = 100·b + position
  for (int b = 0; b < 2; ++b)
    for (int t = 0; t < 16; ++t)
      in[static_cast<size_t>(b * 16 + t)] = 100 * b + t;
  cp::piece_slice(out.data(), in.data(), 2, 16, 4, 4, 1);  // rank 1 of 4: piece 1, chunks 1 and 6
  EXPECT_EQ(out, (std::vector<int32_t>{2, 3, 12, 13, 102, 103, 112, 113}));
}

TEST(CpPieces, RefusesARankCountThatDoesNotDivideTheGrain) {
  std::vector<int32_t> pos(16);
  EXPECT_THROW(cp::piece_positions(pos.data(), 48, 4, 3, 0), ConfigError);
}

}  // namespace
}  // namespace mt

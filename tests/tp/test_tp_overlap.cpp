// The pieces of overlapped tensor parallelism (parallel/tp_overlap.h) and the
// rank-ordered sum under them (SumOrder::ranks, comm/ranked_sum.h), on the
// world as the tp group (2 and 4 ranks).
//
// Golden values: every rank can rebuild every rank's data (pure functions of
// rank and index), so the rank-order float sum ((x0 + x1) + x2) + … is formed
// here element by element and must match bit for bit; a double sum bounds it.
// Chunk counts that do not divide the rows (11 rows in 4 chunks, 5 in 3) and
// more chunks than rows are included.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/mpi_test.h"
#include "ops/gemm.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp_overlap.h"
#include "tp_test_util.h"

namespace mt {
namespace {

using test::random_vec;
using test::world;

// Value of element (row, col) of rank r's partial product: magnitudes that
// differ by rank by 2^10, so that a sum grouped differently rounds differently.
float part_value(int r, int64_t row, int64_t col) {
  const float base = static_cast<float>(((row * 37 + col * 11 + r * 5) % 97) - 48) / 7.0f;
  return base * std::ldexp(1.0f, 10 * (r % 3)) + 0.1f * static_cast<float>(r);
}

float ranked_sum(int P, int64_t row, int64_t col) {
  float s = part_value(0, row, col);
  for (int r = 1; r < P; ++r)
    s += part_value(r, row, col);
  return s;
}

double double_sum(int P, int64_t row, int64_t col) {
  double s = 0;
  for (int r = 0; r < P; ++r)
    s += part_value(r, row, col);
  return s;
}

tp::ChunkGemm fill_rows(int r, int64_t C) {
  return [r, C](int64_t first, int64_t count, float* out) {
    for (int64_t i = 0; i < count; ++i)
      for (int64_t c = 0; c < C; ++c)
        out[i * C + c] = part_value(r, first + i, c);
  };
}

TEST(RankedSum, AllReduceIsTheRankOrderSumWithinTheDoubleBound) {
  const int P = world().size(), me = world().rank();
  for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{37}, int64_t{1000}}) {  // fewer elements than ranks too
    std::vector<float> buf(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k)
      buf[static_cast<size_t>(k)] = part_value(me, k, 0);
    world().all_reduce(buf.data(), n, ElemType::f32, SumOrder::ranks, "test ranked");
    for (int64_t k = 0; k < n; ++k) {
      const float got = buf[static_cast<size_t>(k)];
      EXPECT_EQ(got, ranked_sum(P, k, 0)) << "n=" << n << " k=" << k;
      double mag = 0;
      for (int r = 0; r < P; ++r)
        mag += std::fabs(part_value(r, k, 0));
      // A sum of P terms: within γ_{P−1}·Σ|terms| ≤ P·u·Σ|terms| (u ≈ 5.96e-8).
      EXPECT_LE(std::fabs(got - double_sum(P, k, 0)), P * 6e-8 * mag) << "k=" << k;
    }
  }
}

TEST(RankedSum, ReduceScatterIsTheRankOrderSum) {
  const int P = world().size(), me = world().rank();
  const int64_t n = 13;
  std::vector<float> send(static_cast<size_t>(P * n)), recv(static_cast<size_t>(n));
  for (int64_t k = 0; k < P * n; ++k)
    send[static_cast<size_t>(k)] = part_value(me, k, 1);
  world().reduce_scatter(send.data(), recv.data(), n, ElemType::f32, SumOrder::ranks, "test ranked rs");
  for (int64_t k = 0; k < n; ++k)
    EXPECT_EQ(recv[static_cast<size_t>(k)], ranked_sum(P, me * n + k, 1)) << "k=" << k;
}

// SumOrder::tree (the canonical mode's DP reduction): the canonical tree over
// ranks, written out by hand for the rank counts this test runs on.
float tree_sum(int P, int64_t row, int64_t col) {
  auto x = [&](int r) { return part_value(r, row, col); };
  if (P == 2) return x(0) + x(1);
  if (P == 4) return (x(0) + x(1)) + (x(2) + x(3));
  ADD_FAILURE() << "no hand-written tree for " << P << " ranks";
  return 0.0f;
}

TEST(RankedSum, TreeOrderIsTheCanonicalTreeOverRanks) {
  const int P = world().size(), me = world().rank();
  for (int64_t n : {int64_t{1}, int64_t{37}, int64_t{1000}}) {
    std::vector<float> buf(static_cast<size_t>(n));
    for (int64_t k = 0; k < n; ++k)
      buf[static_cast<size_t>(k)] = part_value(me, k, 2);
    world().all_reduce(buf.data(), n, ElemType::f32, SumOrder::tree, "test tree");
    for (int64_t k = 0; k < n; ++k)
      EXPECT_EQ(buf[static_cast<size_t>(k)], tree_sum(P, k, 2)) << "n=" << n << " k=" << k;
  }
  const int64_t n = 13;
  std::vector<float> send(static_cast<size_t>(P * n)), recv(static_cast<size_t>(n));
  for (int64_t k = 0; k < P * n; ++k)
    send[static_cast<size_t>(k)] = part_value(me, k, 3);
  world().reduce_scatter(send.data(), recv.data(), n, ElemType::f32, SumOrder::tree, "test tree rs");
  for (int64_t k = 0; k < n; ++k)
    EXPECT_EQ(recv[static_cast<size_t>(k)], tree_sum(P, me * n + k, 3)) << "k=" << k;
}

TEST(TpOverlap, ChunkRowsCoverTheRowsOnceUnevenly) {
  const tp::RowRange a = tp::chunk_rows(11, 4, 0), d = tp::chunk_rows(11, 4, 3);
  EXPECT_EQ(a.first, 0);
  EXPECT_EQ(a.count, 3);
  EXPECT_EQ(d.first, 9);
  EXPECT_EQ(d.count, 2);
}

TEST(TpOverlap, MatmulAllReduceInChunksIsTheRankOrderSum) {
  const int P = world().size(), me = world().rank();
  const int64_t N = 11, C = 5;
  for (const tp::Overlap mode : {tp::Overlap::on, tp::Overlap::off}) {
    for (int chunks : {1, 4, 20}) {  // whole, uneven, more chunks than rows
      std::vector<float> part(static_cast<size_t>(N * C), -1.0f);
      int wholes = 0;
      tp::matmul_all_reduce(part.data(), N, C, chunks, world(), mode, fill_rows(me, C),
                            {"test", "reduce_from_tp", "fwd"}, [&] {
                              ++wholes;
                              world().all_reduce(part.data(), N * C, ElemType::f32, SumOrder::ranks, "whole");
                            });
      EXPECT_EQ(wholes, mode == tp::Overlap::off ? 1 : 0);
      for (int64_t i = 0; i < N; ++i)
        for (int64_t c = 0; c < C; ++c)
          ASSERT_EQ(part[static_cast<size_t>(i * C + c)], ranked_sum(P, i, c))
              << chunks << " " << i << "," << c;
    }
  }
}

TEST(TpOverlap, MatmulReduceScatterInChunksIsTheRankOrderSum) {
  const int P = world().size(), me = world().rank();
  const int64_t Nl = 5, N = Nl * P, C = 3;
  for (const tp::Overlap mode : {tp::Overlap::on, tp::Overlap::off}) {
    for (int chunks : {1, 3, 8}) {
      std::vector<float> scratch(static_cast<size_t>(N * C)), out(static_cast<size_t>(Nl * C), -1.0f);
      tp::matmul_reduce_scatter(out.data(), scratch.data(), N, C, chunks, world(), mode, fill_rows(me, C),
                                {"test", "scatter_to_sp", "fwd"}, [&] {
                                  world().reduce_scatter(scratch.data(), out.data(), Nl * C, ElemType::f32,
                                                         SumOrder::ranks, "whole");
                                });
      for (int64_t i = 0; i < Nl; ++i)
        for (int64_t c = 0; c < C; ++c)
          ASSERT_EQ(out[static_cast<size_t>(i * C + c)], ranked_sum(P, me * Nl + i, c)) << chunks << " " << i;
    }
  }
}

TEST(TpOverlap, AllGatherMatmulSeesEachBlockOnceOwnFirst) {
  const int P = world().size(), me = world().rank();
  const int64_t Nl = 3, N = Nl * P, C = 4;
  std::vector<float> local(static_cast<size_t>(Nl * C));
  for (int64_t k = 0; k < Nl * C; ++k)
    local[static_cast<size_t>(k)] = part_value(me, k, 2);
  for (const tp::Overlap mode : {tp::Overlap::on, tp::Overlap::off}) {
    std::vector<float> full(static_cast<size_t>(N * C), -1.0f);
    std::vector<int64_t> seen;
    int wholes = 0;
    tp::all_gather_matmul(
        full.data(), local.data(), N, C, world(), mode,
        [&](int64_t first, int64_t rows) {
          EXPECT_EQ(rows, Nl);
          for (int64_t k = 0; k < rows * C; ++k)  // the block is there when ready() is called
            EXPECT_EQ(full[static_cast<size_t>(first * C + k)],
                      part_value(static_cast<int>(first / Nl), k, 2));
          seen.push_back(first / Nl);
        },
        {"test", "gather_from_sp", "fwd"},
        [&] {
          ++wholes;
          world().all_gather(local.data(), full.data(), Nl * C, ElemType::f32, "whole");
        });
    EXPECT_EQ(wholes, mode == tp::Overlap::off ? 1 : 0);
    ASSERT_EQ(static_cast<int>(seen.size()), P);
    for (int s = 0; s < P; ++s)
      EXPECT_EQ(seen[static_cast<size_t>(s)], (me + s) % P) << "the blocks from this rank on, in rank order";
  }
}

// The tp layers with real GEMMs: overlap on equals off bit for bit (outputs,
// input and weight gradients), with and without SP, at an odd width.
class TpOverlapLayers : public ::testing::TestWithParam<tp::SequenceParallel> {};

TEST_P(TpOverlapLayers, OnEqualsOffBitwise) {
  const int P = world().size(), me = world().rank();
  const int64_t N = 12 * P, IC = 24, OC = 20;  // row layer [OC, IC/P], column layer [OC/P, IC]
  const int64_t ICl = IC / P, OCl = OC / P;
  const bool sp = GetParam() == tp::SequenceParallel::on;
  const int64_t rows_out = sp ? N / P : N;
  const std::vector<float> h = random_vec(N * ICl, 11 + static_cast<uint32_t>(me));
  const std::vector<float> w_row = random_vec(OC * ICl, 21 + static_cast<uint32_t>(me));
  const std::vector<float> resid = random_vec(rows_out * OC, 31 + static_cast<uint32_t>(me));
  const std::vector<float> dcol = random_vec(N * OCl, 41 + static_cast<uint32_t>(me));
  const std::vector<float> w_col = random_vec(OCl * IC, 51 + static_cast<uint32_t>(me));
  const std::vector<float> x = random_vec(rows_out * IC, 61 + static_cast<uint32_t>(me));
  const std::vector<float> drow = random_vec(rows_out * OC, 71 + static_cast<uint32_t>(me));
  std::vector<float> dh[2], dw_row[2];
  std::vector<float> out[2], dinp[2], dw[2], y[2], full[2], scratch(static_cast<size_t>(N * IC + N * OC));
  for (int on = 0; on < 2; ++on) {
    const tp::TpLayer layer{&world(), "test", GetParam(), on ? tp::Overlap::on : tp::Overlap::off};
    out[on].assign(static_cast<size_t>(rows_out * OC), 0.0f);
    tp::row_parallel_forward(out[on].data(), scratch.data(), h.data(), w_row.data(), N, ICl, OC, layer,
                             resid.data());
    y[on].assign(static_cast<size_t>(N * OCl), 0.0f);
    full[on].assign(static_cast<size_t>(N * IC), 0.0f);
    const float* gin =
        tp::column_parallel_forward(y[on].data(), full[on].data(), x.data(), w_col.data(), N, IC, OCl, layer);
    dinp[on].assign(static_cast<size_t>(rows_out * IC), 0.0f);
    dw[on].assign(static_cast<size_t>(OCl * IC), 1.0f);
    tp::column_parallel_backward(dinp[on].data(), dw[on].data(), scratch.data(), dcol.data(), gin,
                                 w_col.data(), N, IC, OCl, layer);
    dh[on].assign(static_cast<size_t>(N * ICl), 0.0f);
    dw_row[on].assign(static_cast<size_t>(OC * ICl), 1.0f);
    tp::row_parallel_backward(dh[on].data(), dw_row[on].data(), scratch.data(), drow.data(), h.data(),
                              w_row.data(), N, ICl, OC, layer);
  }
  EXPECT_EQ(dh[0], dh[1]);
  EXPECT_EQ(dw_row[0], dw_row[1]);
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(y[0], y[1]);
  EXPECT_EQ(dinp[0], dinp[1]);
  EXPECT_EQ(dw[0], dw[1]);
}

INSTANTIATE_TEST_SUITE_P(Sp, TpOverlapLayers,
                         ::testing::Values(tp::SequenceParallel::off, tp::SequenceParallel::on));

}  // namespace
}  // namespace mt

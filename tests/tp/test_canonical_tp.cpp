// The canonical mode's tensor-parallel layers (parallel/canonical_tp.h) with
// the grain c = 4 on tp = world size (2: two pieces a rank; 4: one): every
// output, input gradient and this rank's slice of every weight gradient is
// BITWISE what one process computes with the same 4 pieces over the full
// weights — a fused column layer (blocks 16 | 8 | 8, as q | k | v), a row
// layer with a residual, the vocab-parallel cross-entropy, and the row layer's
// output and a column layer's input gradient under SP and, in chunks, under
// tp_overlap. The one-process
// pieces are also checked against float64 references (bounds of
// tp_test_util.h), so that "equal" cannot be "equally wrong".
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/mpi_test.h"
#include "ops/gemm.h"
#include "ops/reference.h"
#include "parallel/canonical_tp.h"
#include "tp_test_util.h"

namespace mt {
namespace {

using test::block;
using test::random_vec;
using test::rel_err;
using test::to_double;

constexpr int64_t kC = 4, N = 6, IC = 16, Q = 16, KV = 8, OCF = Q + 2 * KV, V = 12;
constexpr int32_t kIgnore = -100;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Of a fused [rows of each block, cols] matrix: rank t's rows of every block, in block order.
std::vector<float> block_rows(const std::vector<float>& m, int64_t cols, const std::vector<int64_t>& blocks,
                              int P, int t) {
  std::vector<float> out;
  int64_t at = 0;
  for (int64_t b : blocks) {
    const auto r = block(m, cols, at + t * b / P, b / P, 0, cols);
    out.insert(out.end(), r.begin(), r.end());
    at += b;
  }
  return out;
}

// Of a [rows, fused columns] matrix: rank t's columns of every block, in block order.
std::vector<float> block_cols(const std::vector<float>& m, int64_t rows, const std::vector<int64_t>& blocks,
                              int P, int t) {
  int64_t cols = 0;
  for (int64_t b : blocks)
    cols += b;
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t at = 0;
    for (int64_t b : blocks) {
      const auto c = block(m, cols, r, 1, at + t * b / P, b / P);
      out.insert(out.end(), c.begin(), c.end());
      at += b;
    }
  }
  return out;
}

// out[n, o] = Σ_k a[n, k] · w[o, k] in float64.
std::vector<double> matmul_t(const std::vector<float>& a, const std::vector<float>& w, int64_t n_, int64_t k_,
                             int64_t o_) {
  std::vector<double> out(static_cast<size_t>(n_ * o_));
  for (int64_t n = 0; n < n_; ++n)
    for (int64_t o = 0; o < o_; ++o) {
      double s = 0;
      for (int64_t k = 0; k < k_; ++k)
        s += double(a[static_cast<size_t>(n * k_ + k)]) * double(w[static_cast<size_t>(o * k_ + k)]);
      out[static_cast<size_t>(n * o_ + o)] = s;
    }
  return out;
}

// Transposes a row-major [rows, cols] matrix.
std::vector<float> transpose(const std::vector<float>& m, int64_t rows, int64_t cols) {
  std::vector<float> out(m.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[static_cast<size_t>(c * rows + r)] = m[static_cast<size_t>(r * cols + c)];
  return out;
}

TEST(CanonicalTp, FusedColumnLayerOnTpIsBitwiseOneProcess) {
  const int P = test::world().size();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const int t = g.rank();
  const std::vector<int64_t> full{Q, KV, KV}, local{Q / P, KV / P, KV / P};
  const auto x = random_vec(N * IC, 1), w = random_vec(OCF * IC, 2), dout = random_vec(N * OCF, 3);
  std::vector<float> leaves(static_cast<size_t>(kC * N * IC));
  // One process: all 4 pieces.
  const tp::Pieces one{kC, nullptr, "one", leaves.data()};
  std::vector<float> out1(N * OCF), dx1(N * IC), dw1(OCF * IC, 0.5f);
  tp::pieces_column_forward(out1.data(), x.data(), w.data(), N, IC, full, one);
  tp::pieces_column_backward(dx1.data(), dw1.data(), dout.data(), x.data(), w.data(), N, IC, full, one);
  EXPECT_TRUE(testing::below(rel_err(out1, matmul_t(x, w, N, IC, OCF)),
                             test::dot_tol(IC, matmul_t(x, w, N, IC, OCF)), "forward"));
  const auto dx_ref = matmul_t(dout, transpose(w, OCF, IC), N, OCF, IC);
  EXPECT_TRUE(testing::below(rel_err(dx1, dx_ref), test::dot_tol(OCF, dx_ref), "dinp"));
  // tp: this rank's c / P pieces, its rows of each block.
  const tp::Pieces mine{kC / P, &g, "col", leaves.data()};
  const auto wl = block_rows(w, IC, full, P, t), doutl = block_cols(dout, N, full, P, t);
  std::vector<float> out(N * (OCF / P)), dx(N * IC), dw(wl.size(), 0.5f);
  tp::pieces_column_forward(out.data(), x.data(), wl.data(), N, IC, local, mine);
  tp::pieces_column_backward(dx.data(), dw.data(), doutl.data(), x.data(), wl.data(), N, IC, local, mine);
  EXPECT_TRUE(same_bits(out, block_cols(out1, N, full, P, t)));
  EXPECT_TRUE(same_bits(dx, dx1));
  EXPECT_TRUE(same_bits(dw, block_rows(dw1, IC, full, P, t)));
}

TEST(CanonicalTp, RowLayerOnTpIsBitwiseOneProcess) {
  const int P = test::world().size();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const int t = g.rank();
  constexpr int64_t K = 16, OC = 8;
  const auto x = random_vec(N * K, 4), w = random_vec(OC * K, 5), resid = random_vec(N * OC, 6);
  const auto dout = random_vec(N * OC, 7);
  std::vector<float> leaves(static_cast<size_t>(kC * N * OC));
  const tp::Pieces one{kC, nullptr, "one", leaves.data()};
  std::vector<float> out1(N * OC), dx1(N * K), dw1(OC * K, 0.25f);
  tp::pieces_row_forward(out1.data(), x.data(), w.data(), N, K, OC, one, resid.data());
  tp::pieces_row_backward(dx1.data(), dw1.data(), dout.data(), x.data(), w.data(), N, K, OC, one);
  auto ref = matmul_t(x, w, N, K, OC);
  for (size_t i = 0; i < ref.size(); ++i)
    ref[i] += resid[i];
  EXPECT_TRUE(testing::below(rel_err(out1, ref), test::dot_tol(K, ref, 1.0), "forward"));
  const tp::Pieces mine{kC / P, &g, "row", leaves.data()};
  const auto xl = block(x, K, 0, N, t * K / P, K / P), wl = block(w, K, 0, OC, t * K / P, K / P);
  std::vector<float> out(N * OC), dx(N * (K / P)), dw(wl.size(), 0.25f);
  tp::pieces_row_forward(out.data(), xl.data(), wl.data(), N, K / P, OC, mine, resid.data());
  tp::pieces_row_backward(dx.data(), dw.data(), dout.data(), xl.data(), wl.data(), N, K / P, OC, mine);
  EXPECT_TRUE(same_bits(out, out1));
  EXPECT_TRUE(same_bits(dx, block(dx1, K, 0, N, t * K / P, K / P)));
  EXPECT_TRUE(same_bits(dw, block(dw1, K, 0, OC, t * K / P, K / P)));
}

// Sequence parallelism: the row layer's output and the column layer's input
// gradient are formed whole and reduce-scattered by the tree, so rank t's N/P
// token rows are those of one process's, bit for bit.
TEST(CanonicalTp, SumsUnderSpAreBitwiseOneProcessRows) {
  const int P = test::world().size();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const int t = g.rank();
  constexpr int64_t Ns = 8, K = 16, OC = 8;
  const int64_t Nl = Ns / P;
  const auto x = random_vec(Ns * K, 11), w = random_vec(OC * K, 12), resid = random_vec(Ns * OC, 13);
  const auto dout = random_vec(Ns * K, 14);  // the column layer's: [Ns, K] out of a [K, OC] weight's input OC
  std::vector<float> leaves(static_cast<size_t>(kC * Ns * OC)), full(static_cast<size_t>(Ns * OC));
  const tp::Pieces one{kC, nullptr, "one", leaves.data()};
  std::vector<float> out1(Ns * OC), dx1(Ns * OC);
  tp::pieces_row_forward(out1.data(), x.data(), w.data(), Ns, K, OC, one, resid.data());
  const auto wc = transpose(w, OC, K);  // a column layer [K, OC]: output features K split
  tp::pieces_column_backward(dx1.data(), nullptr, dout.data(), nullptr, wc.data(), Ns, OC, {K}, one);
  const tp::Pieces mine{kC / P, &g, "sp", leaves.data(), true, full.data()};
  const auto xl = block(x, K, 0, Ns, t * K / P, K / P), wl = block(w, K, 0, OC, t * K / P, K / P);
  const auto residl = block(resid, OC, t * Nl, Nl, 0, OC);
  std::vector<float> out(Nl * OC), dx(Nl * OC);
  tp::pieces_row_forward(out.data(), xl.data(), wl.data(), Ns, K / P, OC, mine, residl.data());
  const auto wcl = block(wc, OC, t * K / P, K / P, 0, OC), doutl = block(dout, K, 0, Ns, t * K / P, K / P);
  tp::pieces_column_backward(dx.data(), nullptr, doutl.data(), nullptr, wcl.data(), Ns, OC, {K / P}, mine);
  EXPECT_TRUE(same_bits(out, block(out1, OC, t * Nl, Nl, 0, OC)));
  EXPECT_TRUE(same_bits(dx, block(dx1, OC, t * Nl, Nl, 0, OC)));
}

// tp_overlap: with 264 tokens the row layer's output and a column layer's
// input gradient run in 3 chunks of the fixed GEMM blocks (128, 128, 8 rows),
// each chunk's tree all-reduce in flight: bitwise one process's whole sums.
TEST(CanonicalTp, OverlappedChunksAreBitwiseOneProcess) {
  const FixedGemmBlocksGuard blocks(true);
  const int P = test::world().size();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const int t = g.rank();
  constexpr int64_t No = 2 * kFixedRowBlock + 8, K = 16, OC = 8;
  const auto x = random_vec(No * K, 21), w = random_vec(OC * K, 22), dout = random_vec(No * K, 23);
  std::vector<float> leaves(static_cast<size_t>(kC * No * OC));
  const tp::Pieces one{kC, nullptr, "one", leaves.data()};
  std::vector<float> out1(No * OC), dx1(No * OC), dw1(K * OC, 0.5f);
  const auto wc = transpose(w, OC, K);
  tp::pieces_row_forward(out1.data(), x.data(), w.data(), No, K, OC, one);
  tp::pieces_column_backward(dx1.data(), dw1.data(), dout.data(), x.data(), wc.data(), No, OC, {K}, one);
  const tp::Pieces mine{kC / P, &g, "overlap", leaves.data(), false, nullptr, true};
  const auto xl = block(x, K, 0, No, t * K / P, K / P), wl = block(w, K, 0, OC, t * K / P, K / P);
  const auto wcl = block(wc, OC, t * K / P, K / P, 0, OC), doutl = block(dout, K, 0, No, t * K / P, K / P);
  std::vector<float> out(No * OC), dx(No * OC), dw(wcl.size(), 0.5f);
  tp::pieces_row_forward(out.data(), xl.data(), wl.data(), No, K / P, OC, mine);
  tp::pieces_column_backward(dx.data(), dw.data(), doutl.data(), x.data(), wcl.data(), No, OC, {K / P}, mine);
  EXPECT_TRUE(same_bits(out, out1));
  EXPECT_TRUE(same_bits(dx, dx1));
  EXPECT_TRUE(same_bits(dw, block(dw1, OC, t * K / P, K / P, 0, OC)));
}

// tp_overlap under SP: 256 tokens a rank, so each rank's block is two fixed
// GEMM blocks; each chunk (128 rows of every rank's block) reduce-scattered
// by the tree: rank t's rows of one process's whole sums.
TEST(CanonicalTp, OverlappedChunksUnderSpAreBitwiseOneProcessRows) {
  const FixedGemmBlocksGuard blocks(true);
  const int P = test::world().size();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const int t = g.rank();
  const int64_t Nl = 2 * kFixedRowBlock, No = P * Nl;
  constexpr int64_t K = 16, OC = 8;
  const auto x = random_vec(No * K, 31), w = random_vec(OC * K, 32), dout = random_vec(No * K, 33);
  std::vector<float> leaves(static_cast<size_t>(kC * No * OC)), full(static_cast<size_t>(No * OC));
  const tp::Pieces one{kC, nullptr, "one", leaves.data()};
  std::vector<float> out1(No * OC), dx1(No * OC);
  const auto wc = transpose(w, OC, K);
  tp::pieces_row_forward(out1.data(), x.data(), w.data(), No, K, OC, one);
  tp::pieces_column_backward(dx1.data(), nullptr, dout.data(), nullptr, wc.data(), No, OC, {K}, one);
  const tp::Pieces mine{kC / P, &g, "sp overlap", leaves.data(), true, full.data(), true};
  ASSERT_TRUE(tp::chunked_under_sp(No, mine));
  const auto xl = block(x, K, 0, No, t * K / P, K / P), wl = block(w, K, 0, OC, t * K / P, K / P);
  const auto wcl = block(wc, OC, t * K / P, K / P, 0, OC), doutl = block(dout, K, 0, No, t * K / P, K / P);
  std::vector<float> out(Nl * OC), dx(Nl * OC);
  tp::pieces_row_forward(out.data(), xl.data(), wl.data(), No, K / P, OC, mine);
  tp::pieces_column_backward(dx.data(), nullptr, doutl.data(), nullptr, wcl.data(), No, OC, {K / P}, mine);
  EXPECT_TRUE(same_bits(out, block(out1, OC, t * Nl, Nl, 0, OC)));
  EXPECT_TRUE(same_bits(dx, block(dx1, OC, t * Nl, Nl, 0, OC)));
}

TEST(CanonicalTp, CrossEntropyOnTpIsBitwiseOneProcess) {
  const int P = test::world().size();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const int t = g.rank();
  const auto logits = random_vec(N * V, 8, 4.0f);
  std::vector<int32_t> targets(N);
  for (int64_t n = 0; n < N; ++n)
    targets[static_cast<size_t>(n)] = static_cast<int32_t>((5 * n + 2) % V);
  targets[3] = kIgnore;
  constexpr float dloss = 0.125f;
  const tp::Pieces one{kC, nullptr, "one", nullptr};
  std::vector<float> loss1(N), lse1(N), d1(N * V);
  tp::pieces_cross_entropy_forward(loss1.data(), lse1.data(), logits.data(), targets.data(), N, V, kIgnore,
                                   one);
  tp::pieces_cross_entropy_backward(d1.data(), logits.data(), lse1.data(), targets.data(), dloss, N, V,
                                    kIgnore, one);
  std::vector<double> loss_ref(N), lse_ref(N);
  ref::cross_entropy_forward(loss_ref.data(), lse_ref.data(), to_double(logits).data(), targets.data(), N, V,
                             kIgnore);
  EXPECT_TRUE(
      testing::below(rel_err(loss1, loss_ref), 4 * testing::kU32, "loss"));  // fp32 roundings of lse − x
  const tp::Pieces mine{kC / P, &g, "head", nullptr};
  const auto ll = block(logits, V, 0, N, t * V / P, V / P);
  std::vector<float> loss(N), lse(N), d(ll.size());
  tp::pieces_cross_entropy_forward(loss.data(), lse.data(), ll.data(), targets.data(), N, V, kIgnore, mine);
  tp::pieces_cross_entropy_backward(d.data(), ll.data(), lse.data(), targets.data(), dloss, N, V, kIgnore,
                                    mine);
  EXPECT_TRUE(same_bits(loss, loss1));
  EXPECT_TRUE(same_bits(lse, lse1));
  EXPECT_TRUE(same_bits(d, block(d1, V, 0, N, t * V / P, V / P)));
}

}  // namespace
}  // namespace mt

// GEMM and the bias-free linear layer against the double reference and
// finite differences.
#include <gtest/gtest.h>

#include "ops/gemm.h"
#include "ops/reference.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::project;
using testing::random_floats;
using testing::rel_error;
using testing::to_double;

struct LinearShape {
  int64_t N, IC, OC;
};

class LinearTest : public ::testing::TestWithParam<LinearShape> {};

TEST_P(LinearTest, ForwardMatchesReferenceAssignAndAdd) {
  const auto [N, IC, OC] = GetParam();
  const auto inp = random_floats(N * IC, 1);
  const auto w = random_floats(OC * IC, 2);
  std::vector<double> expect(N * OC);
  ref::linear_forward(expect.data(), to_double(inp).data(), to_double(w).data(), N, IC, OC);

  std::vector<float> out(N * OC, 1e30f);  // garbage: assign must overwrite
  linear_forward(out.data(), inp.data(), w.data(), N, IC, OC);
  EXPECT_LE(rel_error(out, expect), 1e-5);

  const auto prior = random_floats(N * OC, 3);
  std::vector<float> acc = prior;
  linear_forward(acc.data(), inp.data(), w.data(), N, IC, OC, Out::add);
  for (size_t i = 0; i < expect.size(); ++i)
    expect[i] += prior[i];
  EXPECT_LE(rel_error(acc, expect), 1e-5);
}

TEST_P(LinearTest, BackwardMatchesFiniteDifferencesAndReference) {
  const auto [N, IC, OC] = GetParam();
  const auto inp = random_floats(N * IC, 4);
  const auto w = random_floats(OC * IC, 5);
  const auto r = random_floats(N * OC, 6);  // dout = ∂(Σ r·y)/∂y
  const auto inp_d = to_double(inp), w_d = to_double(w), r_d = to_double(r);

  auto loss_of_inp = [&](const std::vector<double>& x) {
    std::vector<double> y(N * OC);
    ref::linear_forward(y.data(), x.data(), w_d.data(), N, IC, OC);
    return project(r_d, y);
  };
  auto loss_of_w = [&](const std::vector<double>& ww) {
    std::vector<double> y(N * OC);
    ref::linear_forward(y.data(), inp_d.data(), ww.data(), N, IC, OC);
    return project(r_d, y);
  };
  const auto fd_inp = testing::numeric_grad(loss_of_inp, inp_d);
  const auto fd_w = testing::numeric_grad(loss_of_w, w_d);

  // The reference backward is itself checked against finite differences.
  std::vector<double> ref_dinp(N * IC), ref_dw(OC * IC, 0.0);
  ref::linear_backward(ref_dinp.data(), ref_dw.data(), r_d.data(), inp_d.data(), w_d.data(), N, IC, OC);
  EXPECT_LE(rel_error(ref_dinp, fd_inp), 1e-7);
  EXPECT_LE(rel_error(ref_dw, fd_w), 1e-7);

  std::vector<float> dinp(N * IC, -7e20f);  // assigned: garbage must vanish
  const auto dw_prior = random_floats(OC * IC, 7);
  std::vector<float> dw = dw_prior;  // accumulated onto
  linear_backward(dinp.data(), dw.data(), r.data(), inp.data(), w.data(), N, IC, OC);
  EXPECT_LE(rel_error(dinp, fd_inp), 1e-5);
  EXPECT_LE(rel_error(dinp, ref_dinp), 1e-5);
  std::vector<double> dw_delta(dw.size());
  for (size_t i = 0; i < dw.size(); ++i)
    dw_delta[i] = static_cast<double>(dw[i]) - dw_prior[i];
  EXPECT_LE(rel_error(dw_delta, fd_w), 1e-5);

  // Null outputs are skipped.
  std::vector<float> dinp2(N * IC, 0.0f);
  linear_backward(dinp2.data(), nullptr, r.data(), inp.data(), w.data(), N, IC, OC);
  EXPECT_EQ(dinp2, dinp);
  std::vector<float> dw2 = dw_prior;
  linear_backward(nullptr, dw2.data(), r.data(), inp.data(), w.data(), N, IC, OC);
  EXPECT_EQ(dw2, dw);
}

INSTANTIATE_TEST_SUITE_P(Shapes, LinearTest,
                         ::testing::Values(LinearShape{1, 13, 7}, LinearShape{5, 13, 7},
                                           LinearShape{17, 3, 37}, LinearShape{2, 1, 1}));

// C = op(A)·op(B) for every transpose combination, with row strides wider than
// the rows, against a naive double product.
TEST(Sgemm, AllTransposesWithPaddedStrides) {
  const int64_t M = 5, N = 7, K = 13, pad = 3;
  for (Trans ta : {Trans::no, Trans::yes}) {
    for (Trans tb : {Trans::no, Trans::yes}) {
      const int64_t a_rows = ta == Trans::no ? M : K, a_cols = ta == Trans::no ? K : M;
      const int64_t b_rows = tb == Trans::no ? K : N, b_cols = tb == Trans::no ? N : K;
      const int64_t lda = a_cols + pad, ldb = b_cols + pad, ldc = N + pad;
      const auto A = random_floats(a_rows * lda, 11);
      const auto B = random_floats(b_rows * ldb, 12);
      std::vector<float> C(M * ldc, 5.0f);
      sgemm(ta, tb, M, N, K, A.data(), lda, B.data(), ldb, C.data(), ldc, Out::add);
      for (int64_t i = 0; i < M; ++i) {
        for (int64_t j = 0; j < N; ++j) {
          double sum = 5.0;
          for (int64_t k = 0; k < K; ++k) {
            const double a = ta == Trans::no ? A[i * lda + k] : A[k * lda + i];
            const double b = tb == Trans::no ? B[k * ldb + j] : B[j * ldb + k];
            sum += a * b;
          }
          EXPECT_NEAR(C[i * ldc + j], sum, 1e-5 * (1 + std::abs(sum))) << i << "," << j;
        }
        for (int64_t j = N; j < ldc; ++j)
          EXPECT_EQ(C[i * ldc + j], 5.0f) << "padding was written";
      }
    }
  }
}

TEST(Sgemm, EmptyInnerDimensionAssignsZeroOrLeavesUnchanged) {
  std::vector<float> C(6, 3.0f);
  sgemm(Trans::no, Trans::no, 2, 3, 0, nullptr, 0, nullptr, 3, C.data(), 3, Out::add);
  EXPECT_EQ(C, std::vector<float>(6, 3.0f));
  sgemm(Trans::no, Trans::no, 2, 3, 0, nullptr, 0, nullptr, 3, C.data(), 3, Out::assign);
  EXPECT_EQ(C, std::vector<float>(6, 0.0f));
}

}  // namespace
}  // namespace mt

// GEMM and the bias-free linear layer against the double reference and
// finite differences.
#include <gtest/gtest.h>

#include "bounds.h"
#include "ops/gemm.h"
#include "ops/reference.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::abs_of;
using testing::gamma_n;
using testing::project;
using testing::random_floats;
using testing::to_double;
using testing::within_bound;

// Bounds: each output element is an fp32 dot product of K terms, so it is
// within γ_K · Σ_k |a_k b_k| of the exact value (tests/bounds.h) whatever the
// BLAS kernel's order; Σ|a_k b_k| is the reference run on |inputs|. With
// Out::add the prior value is one more term: γ_{K+1} · (Σ|a_k b_k| + |prior|).
std::vector<double> dot_bound(const std::vector<double>& mag, int64_t K,
                              const std::vector<float>* prior = nullptr) {
  std::vector<double> b(mag.size());
  for (size_t i = 0; i < mag.size(); ++i)
    b[i] = prior ? gamma_n(double(K + 1)) * (mag[i] + std::abs(double((*prior)[i])))
                 : gamma_n(double(K)) * mag[i];
  return b;
}

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

  std::vector<double> mag(N * OC);
  ref::linear_forward(mag.data(), abs_of(to_double(inp)).data(), abs_of(to_double(w)).data(), N, IC, OC);

  std::vector<float> out(N * OC, 1e30f);  // garbage: assign must overwrite
  linear_forward(out.data(), inp.data(), w.data(), N, IC, OC);
  EXPECT_TRUE(within_bound(out, expect, dot_bound(mag, IC), "assign: gamma_IC dot"));

  const auto prior = random_floats(N * OC, 3);
  std::vector<float> acc = prior;
  linear_forward(acc.data(), inp.data(), w.data(), N, IC, OC, Out::add);
  for (size_t i = 0; i < expect.size(); ++i)
    expect[i] += prior[i];
  EXPECT_TRUE(within_bound(acc, expect, dot_bound(mag, IC, &prior), "add: gamma_IC+1 dot"));
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

  // The reference backward is itself checked against finite differences: f is
  // linear in each argument, so they have no truncation error, only f's own
  // double rounding, at most γ_{IC + N·OC} · Σ|r|·|x|·|w| (IC-term products,
  // then an N·OC-term projection), over h.
  std::vector<double> ref_dinp(N * IC), ref_dw(OC * IC, 0.0);
  ref::linear_backward(ref_dinp.data(), ref_dw.data(), r_d.data(), inp_d.data(), w_d.data(), N, IC, OC);
  std::vector<double> mag_y(N * OC);
  ref::linear_forward(mag_y.data(), abs_of(inp_d).data(), abs_of(w_d).data(), N, IC, OC);
  const double df = gamma_n(double(IC + N * OC), testing::kU64) * project(abs_of(r_d), mag_y);
  EXPECT_TRUE(within_bound(ref_dinp, fd_inp, testing::fd_bound(inp_d, ref_dinp, df), "ref dinp vs fd"));
  EXPECT_TRUE(within_bound(ref_dw, fd_w, testing::fd_bound(w_d, ref_dw, df), "ref dw vs fd"));
  // Magnitudes: dinp sums OC terms, dw sums N terms (plus the prior).
  std::vector<double> mag_dinp(N * IC), mag_dw(OC * IC, 0.0);
  ref::linear_backward(mag_dinp.data(), mag_dw.data(), abs_of(r_d).data(), abs_of(inp_d).data(),
                       abs_of(w_d).data(), N, IC, OC);

  std::vector<float> dinp(N * IC, -7e20f);  // assigned: garbage must vanish
  const auto dw_prior = random_floats(OC * IC, 7);
  std::vector<float> dw = dw_prior;  // accumulated onto
  linear_backward(dinp.data(), dw.data(), r.data(), inp.data(), w.data(), N, IC, OC);
  EXPECT_TRUE(within_bound(dinp, ref_dinp, dot_bound(mag_dinp, OC), "dinp: gamma_OC dot"));
  // dw − prior is exact in double, so its error is the accumulation's.
  std::vector<double> dw_delta(dw.size());
  for (size_t i = 0; i < dw.size(); ++i)
    dw_delta[i] = static_cast<double>(dw[i]) - dw_prior[i];
  // Against the finite differences dinp and dw are then within their bounds
  // plus |ref − fd| (the triangle inequality): a third check would add nothing.
  EXPECT_TRUE(within_bound(dw_delta, ref_dw, dot_bound(mag_dw, N, &dw_prior), "dw: gamma_N+1 dot"));

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
          double sum = 5.0, mag = 5.0;
          for (int64_t k = 0; k < K; ++k) {
            const double a = ta == Trans::no ? A[i * lda + k] : A[k * lda + i];
            const double b = tb == Trans::no ? B[k * ldb + j] : B[j * ldb + k];
            sum += a * b;
            mag += std::abs(a * b);
          }
          // C + Σ_k a_k b_k: K + 1 terms, γ_{K+1} · Σ|terms| in any order.
          EXPECT_TRUE(within_bound(C[i * ldc + j], sum, gamma_n(double(K + 1)) * mag, "sgemm: gamma_K+1 dot"))
              << i << "," << j;
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

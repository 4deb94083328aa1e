// Embedding lookup and its scatter-add backward.
#include <gtest/gtest.h>

#include "bounds.h"
#include "ops/embedding.h"
#include "ops/reference.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::project;
using testing::random_floats;
using testing::random_ints;
using testing::to_double;

constexpr int64_t kV = 37;

class EmbeddingTest : public ::testing::TestWithParam<int64_t> {};  // N

TEST_P(EmbeddingTest, ForwardCopiesRows) {
  const int64_t N = GetParam(), C = 13;
  const auto table = random_floats(kV * C, 1);
  const auto ids = random_ints(N, 2, 0, kV - 1);
  std::vector<float> out(N * C, 1e30f);
  embedding_forward(out.data(), ids.data(), table.data(), N, C);
  std::vector<double> expect(N * C);
  ref::embedding_forward(expect.data(), ids.data(), to_double(table).data(), N, C);
  for (int64_t i = 0; i < N * C; ++i)
    ASSERT_EQ(out[i], expect[i]) << i;  // a copy is exact
}

TEST_P(EmbeddingTest, BackwardAccumulatesAndMatchesFiniteDifferences) {
  const int64_t N = GetParam(), C = 13;
  const auto table = random_floats(kV * C, 3);
  auto ids = random_ints(N, 4, 0, kV - 1);
  if (N > 2) ids[N - 1] = ids[0];  // a repeated id sums its tokens' gradients
  const auto r = random_floats(N * C, 5);
  const auto r_d = to_double(r);

  auto loss = [&](const std::vector<double>& t) {
    std::vector<double> y(N * C);
    ref::embedding_forward(y.data(), ids.data(), t.data(), N, C);
    return project(r_d, y);
  };
  const auto fd = testing::numeric_grad(loss, to_double(table));
  std::vector<double> ref_grad(kV * C, 0.0);
  ref::embedding_backward(ref_grad.data(), r_d.data(), ids.data(), N, C);
  // f is linear in the table: central differences have no truncation error,
  // only f's double rounding, γ^double_{N·C} · Σ|r·y|, over h.
  double mag = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      mag += std::abs(r_d[n * C + c] * table[ids[n] * C + c]);
  const double df = testing::gamma_n(double(N * C), testing::kU64) * mag;
  EXPECT_TRUE(
      testing::within_bound(ref_grad, fd, testing::fd_bound(to_double(table), ref_grad, df), "ref vs fd"));

  const auto prior = random_floats(kV * C, 6);
  std::vector<float> dtable = prior;
  embedding_backward(dtable.data(), r.data(), ids.data(), N, C);
  std::vector<double> expect(kV * C);
  for (size_t i = 0; i < expect.size(); ++i)
    expect[i] = prior[i] + ref_grad[i];
  // Row v sums its tokens' rows onto the prior: count_v + 1 terms in fp32,
  // within γ_{count+1} · (|prior| + Σ|r|) in any order.
  std::vector<double> bound(kV * C), count(kV, 0.0), r_mag(kV * C, 0.0);
  for (int64_t n = 0; n < N; ++n) {
    count[ids[n]] += 1;
    for (int64_t c = 0; c < C; ++c)
      r_mag[ids[n] * C + c] += std::abs(r_d[n * C + c]);
  }
  for (int64_t i = 0; i < kV * C; ++i)
    bound[i] = testing::gamma_n(count[i / C] + 1) * (std::abs(double(prior[i])) + r_mag[i]) + 1e-300;
  EXPECT_TRUE(testing::within_bound(dtable, expect, bound, "dtable: gamma_count+1"));
  // Rows no token uses keep their prior values exactly.
  for (int64_t v = 0; v < kV; ++v) {
    if (std::find(ids.begin(), ids.end(), v) != ids.end()) continue;
    for (int64_t c = 0; c < C; ++c)
      EXPECT_EQ(dtable[v * C + c], prior[v * C + c]);
  }
}

INSTANTIATE_TEST_SUITE_P(Tokens, EmbeddingTest, ::testing::Values(1, 7, 50));

// Many tokens hit few rows, across several channel blocks: the result must be
// bit-identical whatever the number of threads.
TEST(Embedding, BackwardIsBitwiseIndependentOfThreadCount) {
  const int64_t N = 500, C = 200, V = 5;
  const auto dout = random_floats(N * C, 7);
  const auto ids = random_ints(N, 8, 0, V - 1);
  const auto prior = random_floats(V * C, 9);
  std::vector<float> first;
  for (int threads : {1, 2, 3, 4}) {
    testing::ThreadScope scope(threads);
    std::vector<float> dtable = prior;
    embedding_backward(dtable.data(), dout.data(), ids.data(), N, C);
    if (first.empty()) {
      first = dtable;
      // In token order, as the serial reference adds them.
      std::vector<float> serial = prior;
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t c = 0; c < C; ++c)
          serial[ids[n] * C + c] += dout[n * C + c];
      }
      EXPECT_EQ(dtable, serial);
    } else {
      EXPECT_EQ(dtable, first) << threads << " threads";
    }
  }
}

}  // namespace
}  // namespace mt

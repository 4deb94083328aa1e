// Ring, all-gather, Ulysses and hybrid attention on a cp group against the whole sequence's
// attention by the double reference (one process): this rank's out and lse,
// dq, and dk/dv equal to the rows of the full dK/dV for this rank's tokens,
// within 10× the one-process fp32 kernels' distance from the reference. On np 2: cp 2; on np 4: cp 2 (two dp
// replicas side by side) and cp 4.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "cp_problem.h"
#include "cp_test_util.h"

namespace mt {
namespace {

using test::CpCase;
using test::CpVariant;

std::vector<int> cp_sizes() {
  std::vector<int> out;
  for (int cp = 2; cp <= test::world().size(); cp *= 2)
    if (test::world().size() % cp == 0) out.push_back(cp);
  return out;
}

// T/(2·cp) tokens per chunk: 1, 2, 3 and 40 (a local block over the kernel's 64-token tile).
std::vector<CpCase> cases(int cp) {
  const int64_t c2 = 2 * cp;
  return {
      {1, c2 * 1, 4, 2, 8, true},  {2, c2 * 1, 4, 1, 8, true}, {2, c2 * 2, 4, 2, 8, true},
      {2, c2 * 3, 4, 1, 8, true},  {1, c2 * 3, 4, 4, 4, true}, {1, c2 * 40, 4, 2, 16, true},
      {2, c2 * 3, 4, 2, 8, false},  // contiguous: later blocks are masked entirely and skipped
      {1, c2 * 1, 4, 1, 8, false},
  };
}

void expect_parity(CpVariant variant) {
  double worst = 0;
  for (int cp : cp_sizes()) {
    if (variant == CpVariant::hybrid && cp < 4) continue;  // pairs, and a ring of at least two
    Group g = test::cp_mesh(cp).group("cp");
    for (const CpCase& c : cases(cp)) {
      SCOPED_TRACE(c.str(cp));
      const test::CpErrors e = test::run_cp_attention(c, variant, g);
      // Bounds: 10× the one-process fp32 kernels' own distance from the
      // double oracle on the same rows, floor a sum of T terms
      // (testing::layout_tol): ring and all-gather do the same sums in
      // another order (key blocks merged by their lse).
      const int64_t K = std::max(c.T, c.D);
      EXPECT_TRUE(testing::below(e.out, testing::layout_tol(e.one_out, K), "out"));
      EXPECT_TRUE(testing::below(e.lse, testing::layout_tol(e.one_lse, K), "lse"));
      EXPECT_TRUE(testing::below(e.dq, testing::layout_tol(e.one_dq, K), "dq"));
      EXPECT_TRUE(testing::below(e.dk, testing::layout_tol(e.one_dk, K), "dk"));
      EXPECT_TRUE(testing::below(e.dv, testing::layout_tol(e.one_dv, K), "dv"));
      EXPECT_TRUE(e.out_padding_kept);
      worst = std::max({worst, e.out, e.lse, e.dq, e.dk, e.dv});
    }
  }
  if (test::world().rank() == 0) std::printf("[parity] largest relative error on rank 0: %.2e\n", worst);
}

TEST(CpParity, RingMatchesFullAttention) {
  expect_parity(CpVariant::ring);
}

TEST(CpParity, AllGatherMatchesFullAttention) {
  expect_parity(CpVariant::allgather);
}

// Heads exchanged for tokens: H = 4 over 2 or 4 ranks, kv heads split (KV ≥ U)
// or replicated (KV < U, key gradients summed back at the owner).
TEST(CpParity, UlyssesMatchesFullAttention) {
  expect_parity(CpVariant::ulysses);
}

TEST(CpParity, HybridMatchesFullAttention) {
  if (test::world().size() < 4) GTEST_SKIP() << "the hybrid needs cp 4 (pairs, a ring of two)";
  expect_parity(CpVariant::hybrid);
}

}  // namespace
}  // namespace mt

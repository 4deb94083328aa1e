// Ring and all-gather attention on a cp group against the whole sequence's
// attention by the double reference (one process): this rank's out and lse,
// dq, and dk/dv equal to the rows of the full dK/dV for this rank's tokens,
// within 1e-5 of the tensor's scale. On np 2: cp 2; on np 4: cp 2 (two dp
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

constexpr double kTol = 1e-5;

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
    Group g = test::cp_mesh(cp).group("cp");
    for (const CpCase& c : cases(cp)) {
      SCOPED_TRACE(c.str(cp));
      const test::CpErrors e = test::run_cp_attention(c, variant, g);
      EXPECT_LT(e.out, kTol);
      EXPECT_LT(e.lse, kTol);
      EXPECT_LT(e.dq, kTol);
      EXPECT_LT(e.dk, kTol);
      EXPECT_LT(e.dv, kTol);
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

}  // namespace
}  // namespace mt

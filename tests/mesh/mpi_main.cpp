// gtest under mpirun: every rank runs every test (collectives need all ranks,
// in the same order); only rank 0 prints gtest's report; the ranks then agree
// on the result, so the job fails if any rank failed.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "comm/runtime.h"
#include "mpi_world.h"

namespace mt::test {
namespace {
Group g_world;
}
Group& world() {
  return g_world;
}
}  // namespace mt::test

int main(int argc, char** argv) {
  setenv("OMP_NUM_THREADS", "1", 0);
  mt::CommRuntime runtime(&argc, &argv);
  mt::test::world() = runtime.world();
  ::testing::InitGoogleTest(&argc, argv);
  const int rank = runtime.world().rank(), size = runtime.world().size();
  // MT_TEST_ALL_RANKS=1 keeps every rank's report (for debugging one rank).
  const char* all_ranks = std::getenv("MT_TEST_ALL_RANKS");
  if (rank != 0 && !(all_ranks && std::string(all_ranks) == "1")) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();

  // Every rank's failed tests (names, truncated), gathered everywhere as
  // char codes so that rank 0 can say which rank failed what.
  constexpr int kChars = 256;
  std::string mine;
  const auto* unit = ::testing::UnitTest::GetInstance();
  for (int i = 0; i < unit->total_test_suite_count(); ++i) {
    const auto* suite = unit->GetTestSuite(i);
    for (int j = 0; j < suite->total_test_count(); ++j) {
      const auto* info = suite->GetTestInfo(j);
      if (info->result()->Failed()) mine += std::string(suite->name()) + "." + info->name() + " ";
    }
  }
  if (rc != 0 && mine.empty()) mine = "(gtest failed outside a test) ";
  std::vector<int> codes(kChars, 0), all(static_cast<size_t>(kChars * size), 0);
  for (size_t i = 0; i < mine.size() && i + 1 < kChars; ++i)
    codes[i] = static_cast<unsigned char>(mine[i]);
  mt::test::world().all_gather(codes.data(), all.data(), kChars, mt::ElemType::i32, "test result");
  int ranks_failed = 0;
  for (int r = 0; r < size; ++r) {
    std::string names;
    for (int i = 0; i < kChars && all[static_cast<size_t>(r * kChars + i)] != 0; ++i) {
      names += static_cast<char>(all[static_cast<size_t>(r * kChars + i)]);
    }
    if (names.empty()) continue;
    ++ranks_failed;
    if (rank == 0) std::printf("rank %d of %d failed: %s\n", r, size, names.c_str());
  }
  if (rank == 0) {
    std::printf("%s on %d ranks\n", ranks_failed ? "FAILED" : "PASSED", size);
    std::fflush(stdout);
  }
  return ranks_failed ? 1 : 0;
}

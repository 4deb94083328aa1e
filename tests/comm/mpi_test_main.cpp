// gtest under mpirun. Every rank runs every test; the job passes only if every
// rank passed. Rank 0 prints gtest's usual output, the other ranks print only
// their own failures, prefixed with their rank.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "comm/context.h"
#include "comm/runtime.h"
#include "mpi_test.h"

namespace mt::test {
namespace {
Group g_world;
int g_local_ranks = 1;
}  // namespace
Group& world() {
  return g_world;
}
int local_ranks() {
  return g_local_ranks;
}
}  // namespace mt::test

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  // The name is kept here: UnitTest::current_test_info() would deadlock inside
  // OnTestPartResult (gtest holds its mutex while reporting).
  void OnTestStart(const ::testing::TestInfo& t) override {
    test_ = std::string(t.test_suite_name()) + "." + t.name();
  }
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s failed at %s:%d\n%s\n", rank_, test_.c_str(),
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.message());
    std::fflush(stderr);
  }

 private:
  int rank_;
  std::string test_;
};

}  // namespace

int main(int argc, char** argv) {
  mt::CommRuntime runtime(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  mt::test::g_world = runtime.world();
  mt::test::g_local_ranks = runtime.local_ranks();
  mt::Group& world = mt::test::world();
  // A test that leaves the ranks out of step ends the job instead of hanging it.
  world.context().timeout_s = 60;

  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world.rank()));
  }
  const int rc = RUN_ALL_TESTS();
  int64_t failed = rc != 0 ? 1 : 0;
  world.all_reduce(&failed, 1, "test result", mt::ReduceOp::max);
  if (world.rank() == 0 && failed != 0 && rc == 0) {
    std::printf("FAILED on another rank (see its [rank r] lines)\n");
  }
  std::fflush(stdout);
  mt::test::g_world = mt::Group();
  return failed != 0 ? 1 : 0;
}

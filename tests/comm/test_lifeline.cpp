// The lifeline (comm/lifeline.h): the survivor's message, and the roll call's
// word carried on its own connections between every pair of ranks.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "comm/lifeline.h"
#include "mpi_test.h"

namespace mt {
namespace {

TEST(Lifeline, TheMessageGroupsTheLostRanksByNode) {
  NodeMap nodes;
  nodes.node_of_rank = {0, 0, 1, 1};
  nodes.names = {"a", "b"};
  const std::string whole = lost_ranks_message(0, {3, 2}, nodes);
  EXPECT_EQ(
      whole.rfind("meshtrain: rank 0 of 4 lost world ranks 2, 3 on node b (every rank of that node): their "
                  "connections closed without a goodbye",
                  0),
      0u)
      << whole;
  EXPECT_NE(whole.find("(exit status 3)"), std::string::npos) << whole;
  const std::string two = lost_ranks_message(2, {3, 1}, nodes);
  EXPECT_EQ(two.rfind("meshtrain: rank 2 of 4 lost world rank 1 on node a; world rank 3 on node b: ", 0), 0u)
      << two;
}

// Each rank announces a wait on an axis of its own name; every other rank hears
// it on the lifeline, with the call site, within a bounded time.
TEST(Lifeline, EveryRankHearsEveryOthersWait) {
  const int P = test::world().size(), me = test::world().rank();
  std::vector<int> others;
  for (int r = 0; r < P; ++r)
    if (r != me) others.push_back(r);
  lifeline_announce("lifeline-test", 40 + me, "call site of rank " + std::to_string(me), others);
  for (int r : others) {
    HeardWait h;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while ((h = lifeline_heard("lifeline-test", r)).seq < 0 && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    EXPECT_EQ(h.seq, 40 + r) << "from rank " << r;
    EXPECT_EQ(h.label, "call site of rank " + std::to_string(r));
  }
  EXPECT_EQ(lifeline_heard("lifeline-test", me).seq, -1);  // a rank does not tell itself
  EXPECT_EQ(lifeline_heard("another axis", others.empty() ? 0 : others[0]).seq, -1);
  int64_t done = 1;
  test::world().all_reduce(&done, 1, "lifeline test: done");  // no rank leaves while others still listen
}

}  // namespace
}  // namespace mt

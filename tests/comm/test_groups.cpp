// Sub-groups, non-blocking operations, argument errors and the runtime.
#include <gtest/gtest.h>
#include <mpi.h>

#include <climits>
#include <optional>
#include <string>
#include <vector>

#include "comm/context.h"
#include "comm/mpi_backend.h"
#include "comm/runtime.h"
#include "core/error.h"
#include "mpi_test.h"

namespace mt {
namespace {

using test::world;

// 4 ranks → {0,1} {2,3}; 3 ranks → {0,1} {2}; 2 ranks → {0,1}.
TEST(Split, PairsByColorRankOverTwo) {
  const int P = world().size(), me = world().rank();
  Group pair = world().split(me / 2, me, "pair");
  const int first = (me / 2) * 2;
  const int expected_size = std::min(2, P - first);
  EXPECT_EQ(pair.size(), expected_size);
  EXPECT_EQ(pair.rank(), me - first);
  EXPECT_EQ(pair.axis(), "pair");
  EXPECT_EQ(&pair.context(), &world().context());  // one context per process
  // A collective inside each pair sees only the pair's ranks.
  int64_t sum = me + 1;
  pair.all_reduce(&sum, 1, "sum in pair");
  int64_t expected = 0;
  for (int r = first; r < first + expected_size; ++r)
    expected += r + 1;
  EXPECT_EQ(sum, expected);
  std::vector<int64_t> gathered(expected_size, -1);
  int64_t mine = me;
  pair.all_gather(&mine, gathered.data(), 1, ElemType::i64, "gather in pair");
  for (int r = 0; r < expected_size; ++r)
    EXPECT_EQ(gathered[r], first + r);
}

TEST(Split, KeyOrdersRanks) {
  const int P = world().size(), me = world().rank();
  Group reversed = world().split(0, P - me, "reversed");
  EXPECT_EQ(reversed.size(), P);
  EXPECT_EQ(reversed.rank(), P - 1 - me);
  int64_t mine = me;
  std::vector<int64_t> order(P, -1);
  reversed.all_gather(&mine, order.data(), 1, ElemType::i64, "gather reversed");
  for (int r = 0; r < P; ++r)
    EXPECT_EQ(order[r], P - 1 - r);
}

TEST(Split, SubGroupOfSubGroup) {
  const int me = world().rank();
  Group pair = world().split(me / 2, me, "pair");
  Group single = pair.split(pair.rank(), 0, "single");
  EXPECT_EQ(single.size(), 1);
  EXPECT_EQ(single.rank(), 0);
  double x = 2.5;
  single.all_reduce(&x, 1, "alone");
  EXPECT_EQ(x, 2.5);
}

TEST(Async, OverlappingOpsWaitedInReverseOrder) {
  const int P = world().size(), me = world().rank();
  std::vector<float> a(100, 1.0f + me);
  std::vector<double> b(50, 2.0 * me);
  std::vector<int64_t> c_send(3, me), c_recv(3 * P, -1);
  std::vector<float> d(1000, 1.0f);
  std::vector<Work> works;
  works.push_back(world().all_reduce_async(a.data(), 100, ElemType::f32, ReduceOp::sum, "async a"));
  works.push_back(world().all_reduce_async(b.data(), 50, ElemType::f64, ReduceOp::max, "async b"));
  works.push_back(world().all_gather_async(c_send.data(), c_recv.data(), 3, ElemType::i64, "async c"));
  works.push_back(world().all_reduce_async(d.data(), 1000, ElemType::f32, ReduceOp::sum, "async d"));
  for (auto it = works.rbegin(); it != works.rend(); ++it)
    it->wait();
  for (Work& w : works)
    EXPECT_FALSE(w.valid());
  EXPECT_EQ(a[99], static_cast<float>(P * (P + 1) / 2));
  EXPECT_EQ(b[0], 2.0 * (P - 1));
  for (int r = 0; r < P; ++r)
    EXPECT_EQ(c_recv[3 * r + 2], r);
  EXPECT_EQ(d[500], static_cast<float>(P));
}

TEST(Async, TestPollsAndRecordsOnce) {
  CommLedger& ledger = world().context().ledger;
  ledger.clear();
  double x = 1.0;
  Work w = world().all_reduce_async(&x, 1, ElemType::f64, ReduceOp::sum, "polled");
  while (!w.test()) {
  }
  EXPECT_TRUE(w.test());  // stays complete
  w.wait();
  EXPECT_EQ(x, static_cast<double>(world().size()));
  ASSERT_EQ(ledger.entries().size(), 1u);
  EXPECT_EQ(ledger.entries()[0].label, "polled");
}

TEST(Async, DestructorAndAssignmentWait) {
  const int P = world().size();
  float x = 1.0f, y = 2.0f;
  {
    Work w = world().all_reduce_async(&x, 1, ElemType::f32, ReduceOp::sum, "dropped");
    w = world().all_reduce_async(&y, 1, ElemType::f32, ReduceOp::sum, "replacing");  // waits for x's
    EXPECT_EQ(x, static_cast<float>(P));
  }
  EXPECT_EQ(y, 2.0f * P);
  Work empty;
  EXPECT_FALSE(empty.valid());
  EXPECT_TRUE(empty.test());
  empty.wait();
}

TEST(Ledger, RecordsOpAxisLabelElementsBytesStep) {
  const int P = world().size(), me = world().rank();
  CommContext& ctx = world().context();
  ctx.ledger.clear();
  Group dp = world().split(0, me, "dp");
  ctx.step = 7;
  std::vector<float> a(10, 1.0f);
  dp.all_reduce(a.data(), 10, "grads");
  std::vector<double> g_send(3, 1.0), g_recv(3 * P);
  world().all_gather(g_send.data(), g_recv.data(), 3, ElemType::f64, "params");
  std::vector<int64_t> rs_send(2 * P, 1), rs_recv(2);
  dp.reduce_scatter(rs_send.data(), rs_recv.data(), 2, ElemType::i64, ReduceOp::sum, "shard grads");
  ctx.step = 8;
  std::vector<float> bc(5);
  world().broadcast(bc.data(), 5, ElemType::f32, 0, "init");
  world().barrier("sync");
  ctx.step = -1;

  const auto& e = ctx.ledger.entries();
  ASSERT_EQ(e.size(), 5u);
  struct Want {
    const char *op, *axis, *label;
    int64_t elements, bytes, step;
  };
  const Want want[5] = {{"all_reduce", "dp", "grads", 10, 40, 7},
                        {"all_gather", "world", "params", 3, 24, 7},
                        {"reduce_scatter", "dp", "shard grads", 2 * P, 16 * P, 7},
                        {"broadcast", "world", "init", 5, 20, 8},
                        {"barrier", "world", "sync", 0, 0, 8}};
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(e[i].op, want[i].op) << i;
    EXPECT_EQ(e[i].axis, want[i].axis) << i;
    EXPECT_EQ(e[i].label, want[i].label) << i;
    EXPECT_EQ(e[i].elements, want[i].elements) << i;
    EXPECT_EQ(e[i].bytes, want[i].bytes) << i;
    EXPECT_EQ(e[i].step, want[i].step) << i;
    EXPECT_GE(e[i].seconds, 0.0) << i;
  }
  EXPECT_EQ(ctx.ledger.step_entries(8).size(), 2u);
  EXPECT_EQ(ctx.ledger.step_entries(9).size(), 0u);
  const auto step7 = ctx.ledger.bytes_by_op_axis(7);
  EXPECT_EQ(step7.size(), 3u);
  EXPECT_EQ(step7.at({"all_reduce", "dp"}), 40);
  EXPECT_EQ(step7.at({"reduce_scatter", "dp"}), 16 * P);
  const auto all = ctx.ledger.bytes_by_op_axis();
  EXPECT_EQ(all.size(), 5u);
  EXPECT_EQ(all.at({"broadcast", "world"}), 20);
  const std::string table = ctx.ledger.summary();
  EXPECT_NE(table.find("reduce_scatter"), std::string::npos) << table;
  EXPECT_NE(table.find("dp"), std::string::npos) << table;
}

TEST(Ledger, PointToPointAndAllToAllv) {
  const int P = world().size(), me = world().rank();
  CommLedger& ledger = world().context().ledger;
  ledger.clear();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  int32_t out = me, in = -1;
  Work r = world().recv_async(&in, 1, ElemType::i32, prev, 0, "ring in");
  world().send(&out, 1, ElemType::i32, next, 0, "ring out");
  r.wait();
  std::vector<int64_t> counts(P, 2), displs(P);
  for (int j = 0; j < P; ++j)
    displs[j] = 2 * j;
  std::vector<float> s(2 * P), d(2 * P);
  world().all_to_allv(s.data(), counts, displs, d.data(), counts, displs, ElemType::f32, "a2av");
  const auto bytes = ledger.bytes_by_op_axis();
  EXPECT_EQ(bytes.at({"send", "world"}), 4);
  EXPECT_EQ(bytes.at({"recv", "world"}), 4);
  EXPECT_EQ(bytes.at({"all_to_allv", "world"}), 8 * P);
}

// Errors found before any transfer starts happen on every rank alike, so the
// ranks stay in step.
TEST(Errors, BadArgumentsThrowWithTheNumbers) {
  const int P = world().size();
  float x[4] = {};
  try {
    world().all_reduce(x, int64_t{INT_MAX} + 1, ElemType::f32, ReduceOp::sum, "huge");
    ADD_FAILURE() << "no error for a count above INT_MAX";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("2147483648"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("exceeds MPI's limit"), std::string::npos) << e.what();
  }
  EXPECT_THROW(world().all_reduce(x, -1, ElemType::f32, ReduceOp::sum, "neg"), Error);
  EXPECT_THROW(world().broadcast(x, 1, ElemType::f32, P, "bad root"), Error);
  EXPECT_THROW(world().send(x, 1, ElemType::f32, -1, 0, "bad peer"), Error);
  EXPECT_THROW(world().reduce_scatter(x, x + 1, 1, ElemType::f32, ReduceOp::sum, "overlap"), Error);
  std::vector<int64_t> short_counts(P + 1, 0), zeros(P, 0);
  EXPECT_THROW(world().all_to_allv(x, short_counts, zeros, x, zeros, zeros, ElemType::f32, "bad a2av"),
               Error);
  EXPECT_THROW(world().split(-1, 0, "neg"), Error);
  Group empty;
  EXPECT_THROW((void)empty.size(), Error);
}

TEST(Errors, MpiCheckReportsFileLineAndMpisMessage) {
  try {
    mpi_check(MPI_ERR_COUNT, "MPI_Isend(buf, n)", "/build/src/comm/mpi_backend.cpp", 42);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(MPI_ERR_COUNT, text, &len);
    EXPECT_EQ(std::string(e.what()), "src/comm/mpi_backend.cpp:42: MPI_Isend failed: " + std::string(text));
  }
}

// A message longer than the receive buffer comes back from MPI as an error
// code (MPI_ERRORS_RETURN) and becomes an mt::Error; a shorter one is caught
// by our own count check.
TEST(Errors, ReceiveCountMismatch) {
  const int me = world().rank();
  double buf[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  if (me == 0) {
    world().send(buf, 4, ElemType::f64, 1, 3, "four");
    world().send(buf, 4, ElemType::f64, 1, 4, "four again");
  } else if (me == 1) {
    EXPECT_THROW(world().recv(buf, 2, ElemType::f64, 0, 3, "too short"), Error);
    try {
      world().recv(buf, 8, ElemType::f64, 0, 4, "too long");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected 8 elements from rank 0, got 4"), std::string::npos)
          << e.what();
    }
  }
  world().barrier("after mismatch");
}

TEST(Runtime, NoStartupErrorReturnsAndLocalRanksCountsThisMachine) {
  agree_on_startup_errors(world(), std::nullopt);
  EXPECT_EQ(test::local_ranks(), world().size());  // the tests run on one machine
  EXPECT_EQ(elem_size(ElemType::f64), 8);
  EXPECT_STREQ(elem_type_name(ElemType::i64), "i64");
}

}  // namespace
}  // namespace mt

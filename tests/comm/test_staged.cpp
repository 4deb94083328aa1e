// Host-staged communication of device buffers (comm/staged_backend.h) under
// the fake device, whose pointers fault if the host dereferences them: every
// collective on device buffers gives the bytes the same collective gives on
// host buffers, and stages exactly the bytes of the header's convention
// (counted twice: by the decorator per operation, and by core/device.h's
// crossing counts under "comm staging").
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "comm/mpi_backend.h"
#include "comm/staged_backend.h"
#include "core/device.h"
#include "core/error.h"
#include "core/fake_device.h"
#include "core/memory.h"
#include "mpi_test.h"

namespace mt {
namespace {

using test::world;

}  // namespace

// gtest's messages show the counts by name.
void PrintTo(const StagedBytes& n, std::ostream* os) {
  *os << "{out " << n.out_copies << " copies, " << n.out_bytes << " B; back " << n.back_copies << " copies, "
      << n.back_bytes << " B}";
}
void PrintTo(const CrossingCount& n, std::ostream* os) {
  *os << "{to host " << n.to_host << ", " << n.to_host_bytes << " B; from host " << n.from_host << ", "
      << n.from_host_bytes << " B}";
}

namespace {

// Element k of rank r: magnitudes over several decades, so that a sum formed
// in another order or over other operands rounds differently.
float val(int r, int64_t k) {
  return static_cast<float>(std::sin(0.37 * static_cast<double>(k) + 1.3 * r) * std::pow(10.0, k % 7 - 3));
}

std::vector<float> rank_data(int r, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k)
    v[static_cast<size_t>(k)] = val(r, k);
  return v;
}

DeviceBuffer to_device(const std::vector<float>& v) {
  const auto bytes = static_cast<int64_t>(v.size() * sizeof(float));
  DeviceBuffer d(fake_allocator(), bytes, MemKind::scratch);
  copy_from_host(d.data(), v.data(), bytes, "test upload");
  return d;
}

std::vector<float> from_device(const DeviceBuffer& d) {
  std::vector<float> v(static_cast<size_t>(d.bytes()) / sizeof(float));
  copy_to_host(v.data(), d.data(), d.bytes(), "test download");
  return v;
}

float* dev(const DeviceBuffer& d) {
  return static_cast<float*>(d.data());
}

bool same_bytes(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Copies out and back of `bytes` each (0 bytes: no copy).
StagedBytes staged(int64_t out_bytes, int64_t back_bytes) {
  return {out_bytes > 0 ? 1 : 0, out_bytes, back_bytes > 0 ? 1 : 0, back_bytes};
}

// The process's crossings under "comm staging" equal the decorator's counts.
void expect_crossings_match() {
  CrossingCount want;
  for (const auto& [op, n] : staged_counts()) {
    want.to_host += n.out_copies;
    want.to_host_bytes += n.out_bytes;
    want.from_host += n.back_copies;
    want.from_host_bytes += n.back_bytes;
  }
  EXPECT_EQ(crossing_count(kStagingLabel), want);
}

// Under the fake device: `g` is the world for the run's device.
class Staged : public ::testing::Test {
 protected:
  void SetUp() override {
    set_run_allocator(fake_allocator());
    g = world().for_run_device();
    reset_staged_counts();
    reset_crossing_counts();
  }
  void TearDown() override { set_run_allocator(host_allocator()); }
  // Starts the counts of the next operation.
  void reset() {
    expect_crossings_match();
    reset_staged_counts();
    reset_crossing_counts();
  }
  Group g;
};

constexpr int64_t kF = sizeof(float);

TEST(StagedBackendWrap, HostRunHasNoDecorator) {
  MPI_Comm comm = MPI_COMM_NULL;
  MT_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  std::shared_ptr<Backend> mpi = std::make_shared<MpiBackend>(comm);
  EXPECT_EQ(run_allocator().device(), kHost);
  EXPECT_EQ(wrap_for_device(mpi).get(), mpi.get());  // the MPI backend itself: nothing in the path

  set_run_allocator(fake_allocator());
  std::shared_ptr<Backend> w = wrap_for_device(mpi);
  auto* staged = dynamic_cast<StagedBackend*>(w.get());
  EXPECT_TRUE(staged != nullptr && staged->wrapped().get() == mpi.get());
  EXPECT_EQ(wrap_for_device(w).get(), w.get());  // wrapped once only
  std::shared_ptr<Backend> sub = w->split(world().rank() % 2, world().rank());
  auto* staged_sub = dynamic_cast<StagedBackend*>(sub.get());
  EXPECT_TRUE(staged_sub != nullptr && dynamic_cast<MpiBackend*>(staged_sub->wrapped().get()) != nullptr);
  EXPECT_EQ(sub->size(), (world().size() + 1 - world().rank() % 2) / 2);
  set_run_allocator(host_allocator());
}

TEST_F(Staged, AllReduceBothOrders) {
  const int me = g.rank();
  const int64_t n = 1001;  // uneven blocks of the rank-ordered sum for P = 2, 3, 4
  for (SumOrder order : {SumOrder::library, SumOrder::ranks}) {
    std::vector<float> host = rank_data(me, n);
    DeviceBuffer d = to_device(host);
    EXPECT_TRUE(fake_tagged(d.data()));
    world().all_reduce(host.data(), n, ElemType::f32, order, "host sum");
    g.all_reduce(d.data(), n, ElemType::f32, order, "device sum");
    EXPECT_TRUE(same_bytes(from_device(d), host)) << "order " << static_cast<int>(order);
    EXPECT_EQ(staged_count("all_reduce"), staged(n * kF, n * kF));
    reset();
  }
  std::vector<float> host = rank_data(me, n);
  DeviceBuffer d = to_device(host);
  world().all_reduce(host.data(), n, "host max", ReduceOp::max);
  g.all_reduce(dev(d), n, "device max", ReduceOp::max);
  EXPECT_TRUE(same_bytes(from_device(d), host));
  EXPECT_EQ(staged_count("all_reduce"), staged(n * kF, n * kF));
  // The host copies are pooled communication memory.
  EXPECT_GE(MemoryTracker::stats().current[static_cast<size_t>(MemKind::comm)], n * kF);
  reset();
  g.all_reduce(dev(d), 0, "device empty");  // nothing to stage
  EXPECT_TRUE(staged_counts().empty());
}

TEST_F(Staged, AllGatherInPlaceAndMixed) {
  const int P = g.size(), me = g.rank();
  const int64_t n = 257;
  const std::vector<float> mine = rank_data(me, n);
  std::vector<float> want(static_cast<size_t>(P * n), -1.0f);
  world().all_gather(mine.data(), want.data(), n, ElemType::f32, "host gather");

  DeviceBuffer send = to_device(mine), recv = to_device(std::vector<float>(want.size(), -2.0f));
  g.all_gather(send.data(), recv.data(), n, ElemType::f32, "device gather");
  EXPECT_TRUE(same_bytes(from_device(recv), want));
  EXPECT_EQ(staged_count("all_gather"), staged(n * kF, P * n * kF));
  reset();

  std::vector<float> init(want.size(), -3.0f);
  std::copy(mine.begin(), mine.end(), init.begin() + me * n);
  DeviceBuffer inplace = to_device(init);
  g.all_gather(dev(inplace) + me * n, inplace.data(), n, ElemType::f32, "device gather in place");
  EXPECT_TRUE(same_bytes(from_device(inplace), want));
  EXPECT_EQ(staged_count("all_gather"), staged(n * kF, P * n * kF));
  reset();

  DeviceBuffer recv2 = to_device(std::vector<float>(want.size(), -4.0f));  // host send, device recv
  g.all_gather(mine.data(), recv2.data(), n, ElemType::f32, "mixed gather 1");
  EXPECT_TRUE(same_bytes(from_device(recv2), want));
  EXPECT_EQ(staged_count("all_gather"), staged(0, P * n * kF));
  reset();

  std::vector<float> host_recv(want.size(), -5.0f);  // device send, host recv
  g.all_gather(send.data(), host_recv.data(), n, ElemType::f32, "mixed gather 2");
  EXPECT_TRUE(same_bytes(host_recv, want));
  EXPECT_EQ(staged_count("all_gather"), staged(n * kF, 0));
}

TEST_F(Staged, ReduceScatterBothOrdersAndMixed) {
  const int P = g.size(), me = g.rank();
  const int64_t n = 333;
  const std::vector<float> input = rank_data(me, P * n);
  DeviceBuffer send = to_device(input);
  for (SumOrder order : {SumOrder::library, SumOrder::ranks}) {
    std::vector<float> want(static_cast<size_t>(n), -1.0f);
    world().reduce_scatter(input.data(), want.data(), n, ElemType::f32, order, "host rs");
    DeviceBuffer recv = to_device(std::vector<float>(static_cast<size_t>(n), -2.0f));
    g.reduce_scatter(send.data(), recv.data(), n, ElemType::f32, order, "device rs");
    EXPECT_TRUE(same_bytes(from_device(recv), want)) << "order " << static_cast<int>(order);
    EXPECT_EQ(staged_count("reduce_scatter"), staged(P * n * kF, n * kF));
    reset();
    std::vector<float> host_recv(static_cast<size_t>(n), -3.0f);  // device send, host recv
    g.reduce_scatter(send.data(), host_recv.data(), n, ElemType::f32, order, "mixed rs");
    EXPECT_TRUE(same_bytes(host_recv, want));
    EXPECT_EQ(staged_count("reduce_scatter"), staged(P * n * kF, 0));
    reset();
  }
  std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
  world().reduce_scatter(input.data(), want.data(), n, ElemType::f32, ReduceOp::max, "host rs max");
  DeviceBuffer recv = to_device(got);
  g.reduce_scatter(send.data(), recv.data(), n, ElemType::f32, ReduceOp::max, "device rs max");
  EXPECT_TRUE(same_bytes(from_device(recv), want));
  EXPECT_EQ(staged_count("reduce_scatter"), staged(P * n * kF, n * kF));
}

TEST_F(Staged, BroadcastFromEveryRoot) {
  const int P = g.size(), me = g.rank();
  const int64_t n = 99;
  for (int root = 0; root < P; ++root) {
    const std::vector<float> want = rank_data(root, n);
    DeviceBuffer d = to_device(me == root ? want : std::vector<float>(static_cast<size_t>(n), -1.0f));
    g.broadcast(d.data(), n, ElemType::f32, root, "device bcast");
    EXPECT_TRUE(same_bytes(from_device(d), want)) << "root " << root;
    // The root copies its buffer out; the others copy the result back.
    EXPECT_EQ(staged_count("broadcast"), me == root ? staged(n * kF, 0) : staged(0, n * kF))
        << "root " << root;
    reset();
  }
}

TEST_F(Staged, AllToAll) {
  const int P = g.size(), me = g.rank();
  const int64_t n = 61;
  const std::vector<float> input = rank_data(me, P * n);
  std::vector<float> want(input.size(), -1.0f);
  world().all_to_all(input.data(), want.data(), n, ElemType::f32, "host a2a");
  DeviceBuffer send = to_device(input), recv = to_device(std::vector<float>(input.size(), -2.0f));
  g.all_to_all(send.data(), recv.data(), n, ElemType::f32, "device a2a");
  EXPECT_TRUE(same_bytes(from_device(recv), want));
  EXPECT_EQ(staged_count("all_to_all"), staged(P * n * kF, P * n * kF));
}

// Counts (from + 2·to) mod 3, some of them 0; the send blocks lie in reverse
// rank order with a one-element gap after each (one copy per non-empty
// block), the received ones packed in rank order (one copy for them all).
TEST_F(Staged, AllToAllvUnevenWithGaps) {
  const int P = g.size(), me = g.rank();
  auto count = [](int from, int to) -> int64_t { return 17 * ((from + 2 * to) % 3); };
  std::vector<int64_t> sc(P), sd(P), rc(P), rd(P);
  int64_t s_total = 0, r_total = 0, sent = 0, blocks = 0;
  for (int j = P - 1; j >= 0; --j) {
    sc[j] = count(me, j);
    sd[j] = s_total;
    s_total += sc[j] + 1;
    sent += sc[j];
    blocks += sc[j] > 0;
  }
  for (int j = 0; j < P; ++j) {
    rc[j] = count(j, me);
    rd[j] = r_total;
    r_total += rc[j];
  }
  const std::vector<float> input = rank_data(me, s_total);
  std::vector<float> want(static_cast<size_t>(r_total + 1), -9.0f);  // + 1: an element past the blocks
  world().all_to_allv(input.data(), sc, sd, want.data(), rc, rd, ElemType::f32, "host a2av");
  DeviceBuffer send = to_device(input), recv = to_device(std::vector<float>(want.size(), -9.0f));
  g.all_to_allv(send.data(), sc, sd, recv.data(), rc, rd, ElemType::f32, "device a2av");
  EXPECT_TRUE(same_bytes(from_device(recv), want));  // the last element too: it is not copied back
  const StagedBytes want_counts{blocks, sent * kF, r_total > 0 ? 1 : 0, r_total * kF};
  EXPECT_EQ(staged_count("all_to_allv"), want_counts);
}

TEST_F(Staged, SendRecvRing) {
  const int P = g.size(), me = g.rank();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  const int64_t n = 1 << 16;  // above the eager limit
  DeviceBuffer out = to_device(rank_data(me, n)), in = to_device(std::vector<float>(n, -1.0f));
  Work r = g.recv_async(in.data(), n, ElemType::f32, prev, 5, "device ring recv");
  Work s = g.send_async(out.data(), n, ElemType::f32, next, 5, "device ring send");
  s.wait();
  r.wait();
  EXPECT_TRUE(same_bytes(from_device(in), rank_data(prev, n)));
  EXPECT_EQ(staged_count("send"), staged(n * kF, 0));
  EXPECT_EQ(staged_count("recv"), staged(0, n * kF));
}

// A receive into a device buffer: until the message has arrived and a poll has
// seen it, the buffer keeps its bytes and nothing is copied back. Rank 1 sends
// only after the barrier, which rank 0 enters after its checks.
TEST_F(Staged, RecvIsCopiedBackOnlyOnCompletion) {
  const int me = g.rank();
  const int64_t n = 4096;
  const std::vector<float> old(n, -1.0f), msg = rank_data(1, n);
  DeviceBuffer in = to_device(old);
  Work r;
  if (me == 0) {
    r = g.recv_async(in.data(), n, ElemType::f32, 1, 7, "device early recv");
    EXPECT_FALSE(r.test());
    EXPECT_TRUE(same_bytes(from_device(in), old));
    EXPECT_EQ(staged_count("recv"), StagedBytes{});
  }
  g.barrier("recv test: rank 0 has checked");
  if (me == 1) g.send(msg.data(), n, ElemType::f32, 0, 7, "host late send");
  if (me == 0) {
    r.wait();
    EXPECT_TRUE(same_bytes(from_device(in), msg));
    EXPECT_EQ(staged_count("recv"), staged(0, n * kF));
  }
  EXPECT_EQ(staged_count("send"), StagedBytes{});  // a host buffer passes straight through
}

// A failed receive names the call as on the host and copies nothing back.
TEST_F(Staged, FailedRecvNamesTheCallAndCopiesNothingBack) {
  const int me = g.rank();
  const std::vector<float> msg = rank_data(0, 4), old(8, -1.0f);
  if (me == 0) g.send(msg.data(), 4, ElemType::f32, 1, 3, "four");
  if (me == 1) {
    DeviceBuffer in = to_device(old);
    try {
      g.recv(in.data(), 8, ElemType::f32, 0, 3, "eight into the device");
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                "recv on axis world (eight into the device): expected 8 elements from rank 0, got 4");
    }
    EXPECT_TRUE(same_bytes(from_device(in), old));
    EXPECT_EQ(staged_count("recv"), StagedBytes{});
  }
  g.barrier("after the failed recv");
}

TEST_F(Staged, AsyncCollectivesCompleteByTestAndWait) {
  const int P = g.size(), me = g.rank();
  const int64_t n = 1 << 15;
  std::vector<float> host = rank_data(me, n), gathered(static_cast<size_t>(P * n));
  DeviceBuffer sum = to_device(host), send = to_device(host), recv = to_device(gathered);
  Work a = g.all_reduce_async(sum.data(), n, ElemType::f32, SumOrder::ranks, "async device sum");
  Work b = g.all_gather_async(send.data(), recv.data(), n, ElemType::f32, "async device gather");
  while (!b.test()) {
  }
  a.wait();
  world().all_reduce(host.data(), n, ElemType::f32, SumOrder::ranks, "host sum");
  world().all_gather(rank_data(me, n).data(), gathered.data(), n, ElemType::f32, "host gather");
  EXPECT_TRUE(same_bytes(from_device(sum), host));
  EXPECT_TRUE(same_bytes(from_device(recv), gathered));
  EXPECT_EQ(staged_count("all_reduce"), staged(n * kF, n * kF));
  EXPECT_EQ(staged_count("all_gather"), staged(n * kF, P * n * kF));
  expect_crossings_match();
}

}  // namespace
}  // namespace mt

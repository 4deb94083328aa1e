// Every collective, in every element type, with values that name the sending
// rank and the element, so that a wrong order or offset fails.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "mpi_test.h"

namespace mt {
namespace {

using test::elem_type_of;
using test::world;

// Element k of rank r's data; exact in every type (f32 is exact below 2^24).
template <typename T>
T val(int r, int64_t k) {
  return static_cast<T>((r + 1) * 1000 + k);
}

template <typename T>
class Collectives : public ::testing::Test {};
using Types = ::testing::Types<float, double, int32_t, int64_t>;
TYPED_TEST_SUITE(Collectives, Types);

TYPED_TEST(Collectives, AllReduceSum) {
  using T = TypeParam;
  const int P = world().size(), me = world().rank();
  const int64_t n = 37;
  std::vector<T> buf(n);
  for (int64_t k = 0; k < n; ++k)
    buf[k] = val<T>(me, k);
  world().all_reduce(buf.data(), n, elem_type_of<T>(), ReduceOp::sum, "test sum");
  for (int64_t k = 0; k < n; ++k) {
    EXPECT_EQ(buf[k], static_cast<T>(1000 * P * (P + 1) / 2 + P * k)) << "k=" << k;
  }
}

TYPED_TEST(Collectives, AllReduceMax) {
  using T = TypeParam;
  const int P = world().size(), me = world().rank();
  const int64_t n = 11;
  std::vector<T> buf(n);
  // Rank (k mod P) holds the largest value of element k, and values are negative
  // elsewhere, so a sum or a wrong rank's value both fail.
  for (int64_t k = 0; k < n; ++k)
    buf[k] = static_cast<T>(k % P == me ? 500 + k : -100 - me);
  world().all_reduce(buf.data(), n, elem_type_of<T>(), ReduceOp::max, "test max");
  for (int64_t k = 0; k < n; ++k)
    EXPECT_EQ(buf[k], static_cast<T>(500 + k)) << "k=" << k;
}

TYPED_TEST(Collectives, AllGather) {
  using T = TypeParam;
  const int P = world().size(), me = world().rank();
  const int64_t n = 5;
  std::vector<T> send(n), recv(P * n, static_cast<T>(-1));
  for (int64_t k = 0; k < n; ++k)
    send[k] = val<T>(me, k);
  world().all_gather(send.data(), recv.data(), n, elem_type_of<T>(), "test gather");
  for (int r = 0; r < P; ++r) {
    for (int64_t k = 0; k < n; ++k)
      EXPECT_EQ(recv[r * n + k], val<T>(r, k)) << "r=" << r << " k=" << k;
  }
}

TYPED_TEST(Collectives, AllGatherInPlace) {
  using T = TypeParam;
  const int P = world().size(), me = world().rank();
  const int64_t n = 6;
  std::vector<T> buf(P * n, static_cast<T>(-7));
  for (int64_t k = 0; k < n; ++k)
    buf[me * n + k] = val<T>(me, k);
  world().all_gather(buf.data() + me * n, buf.data(), n, elem_type_of<T>(), "test gather in place");
  for (int r = 0; r < P; ++r) {
    for (int64_t k = 0; k < n; ++k)
      EXPECT_EQ(buf[r * n + k], val<T>(r, k)) << "r=" << r << " k=" << k;
  }
}

TYPED_TEST(Collectives, ReduceScatterSumAndMax) {
  using T = TypeParam;
  const int P = world().size(), me = world().rank();
  const int64_t n = 4;
  std::vector<T> send(P * n), recv(n, static_cast<T>(-1));
  for (int64_t k = 0; k < P * n; ++k)
    send[k] = val<T>(me, k);
  world().reduce_scatter(send.data(), recv.data(), n, elem_type_of<T>(), ReduceOp::sum, "test rs sum");
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = me * n + i;  // this rank's slot of the input
    EXPECT_EQ(recv[i], static_cast<T>(1000 * P * (P + 1) / 2 + P * k)) << "i=" << i;
  }
  world().reduce_scatter(send.data(), recv.data(), n, elem_type_of<T>(), ReduceOp::max, "test rs max");
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(recv[i], val<T>(P - 1, me * n + i)) << "i=" << i;
}

TYPED_TEST(Collectives, BroadcastFromEveryRoot) {
  using T = TypeParam;
  const int P = world().size(), me = world().rank();
  const int64_t n = 9;
  for (int root = 0; root < P; ++root) {
    std::vector<T> buf(n, static_cast<T>(-3));
    if (me == root) {
      for (int64_t k = 0; k < n; ++k)
        buf[k] = val<T>(root, k);
    }
    world().broadcast(buf.data(), n, elem_type_of<T>(), root, "test bcast");
    for (int64_t k = 0; k < n; ++k)
      EXPECT_EQ(buf[k], val<T>(root, k)) << "root=" << root << " k=" << k;
  }
}

// Block j of what rank r sends encodes (r, j): val(r, 100·j + i).
TYPED_TEST(Collectives, AllToAll) {
  using T = TypeParam;
  const int P = world().size(), me = world().rank();
  const int64_t n = 3;
  std::vector<T> send(P * n), recv(P * n, static_cast<T>(-1));
  for (int j = 0; j < P; ++j) {
    for (int64_t i = 0; i < n; ++i)
      send[j * n + i] = val<T>(me, 100 * j + i);
  }
  world().all_to_all(send.data(), recv.data(), n, elem_type_of<T>(), "test a2a");
  for (int src = 0; src < P; ++src) {
    for (int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(recv[src * n + i], val<T>(src, 100 * me + i)) << "src=" << src << " i=" << i;
    }
  }
}

// Uneven counts (rank r sends 1 + (r + 2j) mod 3 elements to rank j), blocks
// packed in reverse rank order with a one-element gap that must stay untouched.
TYPED_TEST(Collectives, AllToAllvUneven) {
  using T = TypeParam;
  const int P = world().size(), me = world().rank();
  auto count = [](int from, int to) -> int64_t { return 1 + (from + 2 * to) % 3; };
  std::vector<int64_t> sc(P), sd(P), rc(P), rd(P);
  int64_t s_total = 0, r_total = 0;
  for (int j = P - 1; j >= 0; --j) {
    sc[j] = count(me, j);
    sd[j] = s_total;
    s_total += sc[j] + 1;
    rc[j] = count(j, me);
    rd[j] = r_total;
    r_total += rc[j] + 1;
  }
  const T gap = static_cast<T>(-9);
  std::vector<T> send(s_total, gap), recv(r_total, gap);
  for (int j = 0; j < P; ++j) {
    for (int64_t i = 0; i < sc[j]; ++i)
      send[sd[j] + i] = val<T>(me, 100 * j + i);
  }
  world().all_to_allv(send.data(), sc, sd, recv.data(), rc, rd, elem_type_of<T>(), "test a2av");
  for (int src = 0; src < P; ++src) {
    for (int64_t i = 0; i < rc[src]; ++i) {
      EXPECT_EQ(recv[rd[src] + i], val<T>(src, 100 * me + i)) << "src=" << src << " i=" << i;
    }
    EXPECT_EQ(recv[rd[src] + rc[src]], gap) << "gap after the block from " << src;
  }
}

TYPED_TEST(Collectives, SendRecvRing) {
  using T = TypeParam;
  const int P = world().size(), me = world().rank();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  const int64_t n = 8;
  std::vector<T> out(n), in(n, static_cast<T>(-1));
  for (int64_t k = 0; k < n; ++k)
    out[k] = val<T>(me, k);
  Work r = world().recv_async(in.data(), n, elem_type_of<T>(), prev, 5, "test ring recv");
  Work s = world().send_async(out.data(), n, elem_type_of<T>(), next, 5, "test ring send");
  s.wait();
  r.wait();
  for (int64_t k = 0; k < n; ++k)
    EXPECT_EQ(in[k], val<T>(prev, k)) << "k=" << k;
}

// Blocking send/recv along the ring in an order that cannot deadlock:
// even ranks send first, odd ranks receive first (with an odd P the last even
// rank receives from an even rank, which is fine because it sent already).
TEST(Collectives, BlockingSendRecvLargeMessage) {
  const int P = world().size(), me = world().rank();
  const int next = (me + 1) % P, prev = (me + P - 1) % P;
  const int64_t n = 1 << 18;  // 2 MiB of f64: above the eager limit, so it needs a matching receive
  std::vector<double> out(n), in(n, -1.0);
  for (int64_t k = 0; k < n; ++k)
    out[k] = val<double>(me, k);
  if (me % 2 == 0) {
    world().send(out.data(), n, ElemType::f64, next, 1, "test big send");
    world().recv(in.data(), n, ElemType::f64, prev, 1, "test big recv");
  } else {
    world().recv(in.data(), n, ElemType::f64, prev, 1, "test big recv");
    world().send(out.data(), n, ElemType::f64, next, 1, "test big send");
  }
  int64_t bad = 0;
  for (int64_t k = 0; k < n; ++k)
    bad += in[k] != val<double>(prev, k);
  EXPECT_EQ(bad, 0);
}

TEST(Collectives, BarrierAndZeroCounts) {
  world().barrier("test barrier");
  float x = 1.0f;
  world().all_reduce(&x, 0, ElemType::f32, ReduceOp::sum, "test empty");
  EXPECT_EQ(x, 1.0f);
}

}  // namespace
}  // namespace mt

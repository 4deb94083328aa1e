// What CP attention puts on the wire over cp, from the comm ledger, against
// the analytic counts (n_kv = B·Tl·KV·D; 4 bytes per element; positions ride
// in f32 slots of the k/v message):
//   ring forward    cp−1 sends + cp−1 recvs of 2·n_kv + B·Tl   ("k,v,pos forward")
//   ring backward   the same k/v/pos exchanges ("k,v,pos backward"), and
//                   cp−1 sends + cp−1 recvs of 2·n_kv           ("dk,dv backward")
//   all-gather      forward 1 all_gather of 2·n_kv + B·Tl; backward the same
//                   all_gather and 1 reduce_scatter of cp·2·n_kv
// and the blocks attended and skipped (CpStats): zigzag attends every block
// (each rank's late chunk sees all), contiguous rank r skips the cp−1−r blocks after it.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "cp_problem.h"
#include "cp_test_util.h"

namespace mt {
namespace {

using test::CpCase;
using test::CpVariant;

struct Count {
  int64_t calls = 0, elements = 0, bytes = 0;
};

// Per "op label": calls and summed elements/bytes; each entry's bytes = 4 · elements.
std::map<std::string, Count> tally(const std::vector<LedgerEntry>& entries) {
  std::map<std::string, Count> out;
  for (const LedgerEntry& e : entries) {
    Count& c = out[e.op + " " + e.label];
    ++c.calls;
    c.elements += e.elements;
    c.bytes += e.bytes;
    EXPECT_EQ(e.bytes, 4 * e.elements) << e.label;
  }
  return out;
}

void print_once(const Group& g, const std::string& title, const std::map<std::string, Count>& t) {
  if (test::world().rank() != 0 || g.rank() != 0) return;
  std::printf("[ledger] %s\n", title.c_str());
  for (const auto& [key, c] : t)
    std::printf("[ledger]   %-70s calls %lld, elements %lld, bytes %lld\n", key.c_str(),
                static_cast<long long>(c.calls), static_cast<long long>(c.elements),
                static_cast<long long>(c.bytes));
}

std::string dims(int64_t a, int64_t b, int64_t c) {
  return " [" + std::to_string(a) + ", " + std::to_string(b) + ", " + std::to_string(c) + "]";
}

void expect_count(const std::map<std::string, Count>& t, const std::string& key, int64_t calls,
                  int64_t elements_each) {
  const auto it = t.find(key);
  if (calls == 0) {
    EXPECT_EQ(it, t.end()) << key;
    return;
  }
  ASSERT_NE(it, t.end()) << key;
  EXPECT_EQ(it->second.calls, calls) << key;
  EXPECT_EQ(it->second.elements, calls * elements_each) << key;
  EXPECT_EQ(it->second.bytes, 4 * calls * elements_each) << key;
}

TEST(CpLedger, RingExchangesOneBlockPerStep) {
  for (int cp = 1; cp <= test::world().size(); cp *= 2) {
    Group g = test::cp_mesh(cp).group("cp");
    for (bool zigzag : {true, false}) {
      const CpCase c{2, 4 * cp, 4, 2, 8, zigzag};
      SCOPED_TRACE(c.str(cp));
      const int64_t Tl = c.T / cp, n_kv = c.B * Tl * c.KV * c.D, msg = 2 * n_kv + c.B * Tl;
      const size_t mark = test::ledger_mark(g);
      const test::CpErrors e = test::run_cp_attention(c, CpVariant::ring, g, "attn");
      const auto t = tally(test::entries_since(g, mark, g.axis()));
      print_once(g, "ring " + c.str(cp), t);
      const std::string kv = "attn: ring_attention k,v,pos ", kv_shape = dims(c.B, Tl, 2 * c.KV * c.D + 1);
      const std::string dkv = "attn: ring_attention dk,dv backward" + dims(c.B, Tl, 2 * c.KV * c.D);
      expect_count(t, "send " + kv + "forward" + kv_shape, cp - 1, msg);
      expect_count(t, "recv " + kv + "forward" + kv_shape, cp - 1, msg);
      expect_count(t, "send " + kv + "backward" + kv_shape, cp - 1, msg);
      expect_count(t, "recv " + kv + "backward" + kv_shape, cp - 1, msg);
      expect_count(t, "send " + dkv, cp - 1, 2 * n_kv);
      expect_count(t, "recv " + dkv, cp - 1, 2 * n_kv);
      EXPECT_EQ(t.size(), cp == 1 ? 0u : 6u);

      const int r = g.rank();
      const int64_t attended = zigzag ? cp : r + 1;
      for (const cp::CpStats& s : {e.fwd, e.bwd}) {
        EXPECT_EQ(s.blocks_attended, attended);
        EXPECT_EQ(s.blocks_skipped, cp - attended);
      }
      EXPECT_EQ(e.fwd.exchanges, cp - 1);
      EXPECT_EQ(e.bwd.exchanges, 2 * (cp - 1));
      // Skipping a block does not change the result: within 10× the
      // one-process kernels' distance from the oracle (testing::layout_tol).
      EXPECT_TRUE(testing::below(e.out, testing::layout_tol(e.one_out, c.T), "out"));
      EXPECT_TRUE(testing::below(e.dk, testing::layout_tol(e.one_dk, c.T), "dk"));
    }
  }
}

TEST(CpLedger, AllGatherGathersOnceAndReduceScattersOnce) {
  for (int cp = 1; cp <= test::world().size(); cp *= 2) {
    Group g = test::cp_mesh(cp).group("cp");
    const CpCase c{2, 4 * cp, 4, 2, 8, true};
    SCOPED_TRACE(c.str(cp));
    const int64_t Tl = c.T / cp, n_kv = c.B * Tl * c.KV * c.D, msg = 2 * n_kv + c.B * Tl;
    const size_t mark = test::ledger_mark(g);
    const test::CpErrors e = test::run_cp_attention(c, CpVariant::allgather, g, "attn");
    const auto t = tally(test::entries_since(g, mark, g.axis()));
    print_once(g, "all-gather " + c.str(cp), t);
    const std::string kv = "all_gather attn: allgather_attention k,v,pos ",
                      kv_shape = dims(c.B, Tl, 2 * c.KV * c.D + 1);
    expect_count(t, kv + "forward" + kv_shape, 1, msg);
    expect_count(t, kv + "backward" + kv_shape, 1, msg);
    expect_count(t,
                 "reduce_scatter attn: allgather_attention dk,dv backward [" + std::to_string(cp) + ", " +
                     std::to_string(c.B) + ", " + std::to_string(Tl) + ", " + std::to_string(2 * c.KV * c.D) +
                     "]",
                 1, cp * 2 * n_kv);
    EXPECT_EQ(t.size(), 3u);
    EXPECT_EQ(e.fwd.exchanges, 1);
    EXPECT_EQ(e.bwd.exchanges, 2);
  }
}

TEST(CpLedger, BadDimsThrowBeforeAnyMessage) {
  Group g = test::cp_mesh(2).group("cp");
  std::vector<float> buf(1024);
  std::vector<int32_t> pos(64);
  const AttentionDims bad{1, 4, 4, 3, 2, 4, 20, 8, 12};  // 3 heads over 2 kv heads
  const size_t mark = test::ledger_mark(g);
  EXPECT_THROW(cp::ring_attention_forward(buf.data(), buf.data() + 256, buf.data(), buf.data(), buf.data(),
                                          pos.data(), pos.data(), bad, g, "attn"),
               ConfigError);
  EXPECT_THROW(
      cp::ring_attention_backward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                  buf.data(), buf.data(), buf.data(), pos.data(), pos.data(), bad, g, "attn"),
      ConfigError);
  EXPECT_TRUE(test::entries_since(g, mark, g.axis()).empty());
}

}  // namespace
}  // namespace mt

// Ulysses and hybrid attention (parallel/cp_ulysses.h): what they put on the
// wire, from the comm ledger, against the analytic count, and the tracked
// buffers of each call against its plan and a count by hand. With U ranks in
// the all-to-all, Hu = H/U, KVu = KV/U (or 1 when KV < U), row = (Hu + 2·KVu)·D,
// n = B·Tl (4 bytes per element, positions in f32 slots):
//   forward   all_to_all of U·n·(row + 1)            q, k, v, pos to the head owners
//             all_to_all of U·n·(Hu·D + Hu)          out, lse back
//   backward  all_to_all of U·n·(row + 2·Hu·D + Hu + 1)  q, k, v, out, dout, lse, pos
//             all_to_all of U·n·row                  dq, dk, dv back
//   hybrid    the same over the pair (cp_a2a), and the ring's messages
//             (context_parallel.h) over cp_ring for the pair's 2·Tl tokens.
//   buffers   forward comm 2·U·n·(row + 1), scratch U·n·(row + Hu·D + Hu);
//             backward comm 2·U·n·(row + 2·Hu·D + Hu + 1), scratch U·n·(2·row + 2·Hu·D + Hu).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/memory.h"
#include "cp_problem.h"
#include "cp_test_util.h"
#include "parallel/cp_attention.h"
#include "parallel/cp_ulysses.h"

namespace mt {
namespace {

using test::CpCase;
using test::CpVariant;

struct Shape {
  int64_t U, Hu, KVu, row, n, hd;
  Shape(const CpCase& c, int U_, int cp)
      : U(U_), Hu(c.H / U_), KVu(c.KV >= U_ ? c.KV / U_ : 1), row(0), n(c.B * c.T / cp), hd(0) {
    row = (Hu + 2 * KVu) * c.D;
    hd = Hu * c.D;
  }
  std::string dims(const CpCase& c, int cp, int64_t width) const {
    return " [" + std::to_string(U) + ", " + std::to_string(c.B) + ", " + std::to_string(c.T / cp) + ", " +
           std::to_string(width) + "]";
  }
};

// elements per "op label" of `axis` since `mark`.
std::map<std::string, int64_t> tally(const Group& g, size_t mark, const std::string& axis) {
  std::map<std::string, int64_t> out;
  for (const LedgerEntry& e : test::entries_since(g, mark, axis)) {
    out[e.op + " " + e.label] += e.elements;
    EXPECT_EQ(e.bytes, 4 * e.elements) << e.label;
  }
  return out;
}

void expect_ulysses_messages(const std::map<std::string, int64_t>& t, const CpCase& c, const Shape& s,
                             int cp) {
  const std::string a = "all_to_all attn: ulysses ";
  const std::map<std::string, int64_t> want = {
      {a + "q,k,v,pos forward" + s.dims(c, cp, s.row + 1), s.U * s.n * (s.row + 1)},
      {a + "out,lse forward" + s.dims(c, cp, s.hd + s.Hu), s.U * s.n * (s.hd + s.Hu)},
      {a + "q,k,v,out,dout,lse,pos backward" + s.dims(c, cp, s.row + 2 * s.hd + s.Hu + 1),
       s.U * s.n * (s.row + 2 * s.hd + s.Hu + 1)},
      {a + "dq,dk,dv backward" + s.dims(c, cp, s.row), s.U * s.n * s.row}};
  EXPECT_EQ(t, want);
}

TEST(CpUlysses, LedgerIsTheAnalyticCount) {
  for (int cp = 2; cp <= test::world().size(); cp *= 2) {
    Group g = test::cp_mesh(cp).group("cp");
    for (const CpCase& c : {CpCase{2, 4 * cp, 4, 2, 8, true}, CpCase{1, 4 * cp, 4, 4, 4, true}}) {
      SCOPED_TRACE(c.str(cp));
      const size_t mark = test::ledger_mark(g);
      test::run_cp_attention(c, CpVariant::ulysses, g, "attn");
      expect_ulysses_messages(tally(g, mark, "cp"), c, Shape(c, cp, cp), cp);
    }
  }
}

TEST(CpUlysses, HybridLedgerIsPairsThenARing) {
  if (test::world().size() < 4) GTEST_SKIP() << "the hybrid needs cp 4";
  Group g = test::cp_mesh(4).group("cp");
  const CpCase c{2, 16, 4, 2, 8, true};
  const Shape s(c, 2, 4);
  const size_t mark = test::ledger_mark(g);
  test::run_cp_attention(c, CpVariant::hybrid, g, "attn");
  expect_ulysses_messages(tally(g, mark, "cp_a2a"), c, s, 4);
  // The ring over 2 groups: one hop each way of [k | v | pos] for 2·Tl tokens
  // and KVu heads, forward and backward, and one of [dk | dv].
  const int64_t L = 2 * c.T / 4, kv = c.B * L * s.KVu * c.D, msg = 2 * kv + c.B * L;
  const std::string shape = " [" + std::to_string(c.B) + ", " + std::to_string(L) + ", ";
  const std::string k = "attn: ring_attention k,v,pos ", dk = "attn: ring_attention dk,dv backward";
  const std::map<std::string, int64_t> want = {
      {"send " + k + "forward" + shape + std::to_string(2 * s.KVu * c.D + 1) + "]", msg},
      {"recv " + k + "forward" + shape + std::to_string(2 * s.KVu * c.D + 1) + "]", msg},
      {"send " + k + "backward" + shape + std::to_string(2 * s.KVu * c.D + 1) + "]", msg},
      {"recv " + k + "backward" + shape + std::to_string(2 * s.KVu * c.D + 1) + "]", msg},
      {"send " + dk + shape + std::to_string(2 * s.KVu * c.D) + "]", 2 * kv},
      {"recv " + dk + shape + std::to_string(2 * s.KVu * c.D) + "]", 2 * kv}};
  EXPECT_EQ(tally(g, mark, "cp_ring"), want);
  EXPECT_TRUE(test::entries_since(g, mark, "cp").empty());
}

// One call alone: the growth of the tracker's peak per kind, in floats.
std::pair<int64_t, int64_t> tracked(cp::Pass pass, const AttentionDims& d, Group& g) {
  test::CallBuffers c(d, g, 31);
  const int32_t* p = c.pos.data();
  if (pass == cp::Pass::backward)
    cp::ulysses_attention_forward(c.out.data(), c.lse.data(), c.q, c.k, c.v, p, p, d, g, nullptr, 0, "attn");
  const MemStats before = MemoryTracker::stats();
  MemoryTracker::reset_peaks();
  if (pass == cp::Pass::forward) {
    cp::ulysses_attention_forward(c.out.data(), c.lse.data(), c.q, c.k, c.v, p, p, d, g, nullptr, 0, "attn");
  } else {
    cp::ulysses_attention_backward(c.dq(), c.dk(), c.dv(), c.dout.data(), c.out.data(), c.lse.data(), c.q,
                                   c.k, c.v, p, p, d, g, nullptr, 0, "attn");
  }
  const MemStats after = MemoryTracker::stats();
  EXPECT_EQ(after.total_current, before.total_current);  // every buffer freed on return
  auto grew = [&](MemKind kind) {
    const size_t i = static_cast<size_t>(kind);
    return (after.peak[i] - before.current[i]) / 4;
  };
  return {grew(MemKind::comm), grew(MemKind::scratch)};
}

TEST(CpUlysses, TrackedPeakOfEveryCallEqualsThePlanAndTheCountByHand) {
  for (int P = 2; P <= test::world().size(); P *= 2) {
    Group g = test::cp_mesh(P).group("cp");
    for (const auto& [B, Tl, H, KV, D] : {std::array<int64_t, 5>{2, 4, 4, 2, 8}, {1, 6, 8, 8, 4}}) {
      const int64_t W = (H + 2 * KV) * D;
      const AttentionDims d{B, Tl, Tl, H, KV, D, W, W, H * D + 3};
      const int64_t Hu = H / P, KVu = KV >= P ? KV / P : 1, row = (Hu + 2 * KVu) * D, n = B * Tl, hd = Hu * D;
      int64_t most_comm = 0, most_scratch = 0;
      for (const cp::Pass pass : {cp::Pass::forward, cp::Pass::backward}) {
        SCOPED_TRACE(::testing::Message()
                     << "cp " << P << (pass == cp::Pass::forward ? " forward" : " backward") << " B " << B
                     << " Tl " << Tl << " H " << H << " KV " << KV);
        const cp::CallPlan plan = cp::ulysses_call_plan(d, P, 1, 0, pass);
        const auto [comm, scratch] = tracked(pass, d, g);
        EXPECT_EQ(comm, plan.peak(MemKind::comm));
        EXPECT_EQ(scratch, plan.peak(MemKind::scratch));
        const bool fwd = pass == cp::Pass::forward;
        EXPECT_EQ(comm, fwd ? 2 * P * n * (row + 1) : 2 * P * n * (row + 2 * hd + Hu + 1));
        EXPECT_EQ(scratch, fwd ? P * n * (row + hd + Hu) : P * n * (2 * row + 2 * hd + Hu));
        most_comm = std::max(most_comm, comm);
        most_scratch = std::max(most_scratch, scratch);
      }
      EXPECT_EQ(cp::CpAttention::peak_floats(d, cp::CpImpl::ulysses, P, MemKind::comm), most_comm);
      EXPECT_EQ(cp::CpAttention::peak_floats(d, cp::CpImpl::ulysses, P, MemKind::scratch), most_scratch);
    }
  }
}

TEST(CpUlysses, HeadsThatDoNotSplitAreRefusedBeforeAnyMessage) {
  Group g = test::cp_mesh(2).group("cp");
  std::vector<float> buf(4096);
  std::vector<int32_t> pos(64);
  const AttentionDims odd{1, 4, 4, 3, 3, 4, 36, 36, 12};  // 3 query heads over 2 ranks
  const size_t mark = test::ledger_mark(g);
  float* f = buf.data();
  EXPECT_THROW(
      cp::ulysses_attention_forward(f, f + 2048, f, f, f, pos.data(), pos.data(), odd, g, nullptr, 0, "attn"),
      ConfigError);
  EXPECT_THROW(cp::check_ulysses_heads(6, 3, 4, "parallel.cp_impl = ulysses"), ConfigError);  // 6 % 4
  EXPECT_THROW(cp::check_ulysses_heads(8, 6, 4, "parallel.cp_impl = ulysses"), ConfigError);  // 6 vs 4
  EXPECT_NO_THROW(cp::check_ulysses_heads(8, 2, 4, "parallel.cp_impl = ulysses"));  // 4 % 2: replicated
  EXPECT_TRUE(test::entries_since(g, mark, g.axis()).empty());
}

}  // namespace
}  // namespace mt

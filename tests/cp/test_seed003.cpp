// Seed 003 §07: "例如序列1到8切为两半，卡1处理查询位置7，因果 Attention 仍允许它看位置1到7。
// 只读取自己这半段，会把原模型改成不同的 Attention。" — positions 1..8 split into two halves
// over cp = 2; card 1 holds 5..8 and handles the query at position 7, which must still see
// positions 1..7. Reading only its own half would be a different attention.
//
// The numbers: q = 0 makes every visible key weigh the same, and v_j = (j, 1), so the
// output's first component is the mean of the positions the query sees:
//   full attention at 7: (1 + … + 7) / 7 = 4, lse = log 7 (seven scores of 0);
//   own half only (5, 6, 7):   (5 + 6 + 7) / 3 = 6.
// Then random q, k, v: the output at 7 equals a softmax over keys 1..7 written out here.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "cp_test_util.h"
#include "ops/attention.h"
#include "parallel/context_parallel.h"

namespace mt {
namespace {

constexpr int64_t kT = 8, kD = 2;

struct Seq {  // one sequence at positions 1..8, token i at row i−1: q, k, v [8, D]
  std::vector<float> q, k, v;
};

Seq uniform_seq() {
  Seq s{std::vector<float>(kT * kD, 0.0f), test::random_vec(kT * kD, 31), {}};
  for (int64_t j = 1; j <= kT; ++j) {
    s.v.push_back(static_cast<float>(j));
    s.v.push_back(1.0f);
  }
  return s;
}

Seq random_seq() {
  return {test::random_vec(kT * kD, 32, 2.0f), test::random_vec(kT * kD, 33, 2.0f),
          test::random_vec(kT * kD, 34)};
}

// What this rank computes for its four tokens (rows of the sequence), by `variant`.
struct Local {
  std::vector<int32_t> pos;
  std::vector<float> out, lse;
};

Local attend(const Seq& s, const std::vector<int64_t>& rows, Group& cp, bool ring) {
  const int64_t Tl = static_cast<int64_t>(rows.size());
  Local l{{}, std::vector<float>(Tl * kD), std::vector<float>(Tl)};
  std::vector<float> q, k, v;
  for (int64_t row : rows) {
    l.pos.push_back(static_cast<int32_t>(row + 1));  // positions 1..8
    for (int64_t c = 0; c < kD; ++c) {
      q.push_back(s.q[row * kD + c]);
      k.push_back(s.k[row * kD + c]);
      v.push_back(s.v[row * kD + c]);
    }
  }
  const AttentionDims d{1, Tl, Tl, 1, 1, kD, kD, kD, kD};
  auto f = ring ? cp::ring_attention_forward : cp::allgather_attention_forward;
  f(l.out.data(), l.lse.data(), q.data(), k.data(), v.data(), l.pos.data(), l.pos.data(), d, cp, "seed003");
  return l;
}

// Index of position `p` in this rank's tokens, or −1.
int64_t find(const std::vector<int32_t>& pos, int32_t p) {
  for (size_t i = 0; i < pos.size(); ++i)
    if (pos[i] == p) return static_cast<int64_t>(i);
  return -1;
}

// Softmax attention of the query at position 7 over keys at positions 1..7, in double.
std::vector<double> by_hand_at_7(const Seq& s, double* lse) {
  const int64_t qi = 6;
  std::vector<double> score;
  double mx = -INFINITY;
  for (int64_t j = 0; j < 7; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < kD; ++c)
      dot += static_cast<double>(s.q[qi * kD + c]) * s.k[j * kD + c];
    score.push_back(dot / std::sqrt(static_cast<double>(kD)));
    mx = std::max(mx, score.back());
  }
  double sum = 0;
  for (double x : score)
    sum += std::exp(x - mx);
  *lse = mx + std::log(sum);
  std::vector<double> out(kD, 0.0);
  for (int64_t j = 0; j < 7; ++j)
    for (int64_t c = 0; c < kD; ++c)
      out[static_cast<size_t>(c)] += std::exp(score[static_cast<size_t>(j)] - *lse) * s.v[j * kD + c];
  return out;
}

// The two halves of the seed (card 0: rows 0..3 = positions 1..4, card 1: positions 5..8),
// and the zigzag layout of the same 8 tokens (card 0: 1, 2, 7, 8; card 1: 3..6).
std::vector<int64_t> rows_of(bool zigzag, int rank) {
  if (!zigzag) return {rank * 4, rank * 4 + 1, rank * 4 + 2, rank * 4 + 3};
  std::vector<int32_t> pos(4);
  cp::zigzag_positions(pos.data(), kT, 2, rank);
  return {pos[0], pos[1], pos[2], pos[3]};
}

// The bound of the query at position 7 (out, lse): 10× the one-process fp32
// kernel's own distance from `want` over the same keys (testing::layout_tol,
// floor a sum of 7 terms), relative to |want|: cp merges the same terms
// through the blocks' lse in another order.
struct Tol7 {
  double out[kD], lse;
};
Tol7 tol_at_7(const Seq& s, const std::vector<double>& want, double want_lse) {
  std::vector<int32_t> pos(kT);
  for (int64_t j = 0; j < kT; ++j)
    pos[static_cast<size_t>(j)] = static_cast<int32_t>(j + 1);
  const AttentionDims d{1, kT, kT, 1, 1, kD, kD, kD, kD};
  std::vector<float> out(kT * kD), lse(kT);
  attention_forward(out.data(), lse.data(), s.q.data(), s.k.data(), s.v.data(), pos.data(), pos.data(), d);
  Tol7 t{};
  for (int64_t c = 0; c < kD; ++c) {
    const double w = std::abs(want[static_cast<size_t>(c)]);
    t.out[c] = testing::layout_tol(std::abs(out[6 * kD + c] - want[static_cast<size_t>(c)]) / w, 7) * w;
  }
  t.lse = testing::layout_tol(std::abs(lse[6] - want_lse) / std::abs(want_lse), 7) * std::abs(want_lse);
  return t;
}

TEST(Seed003, QueryAtPosition7SeesPositions1To7) {
  Group cp = test::cp_mesh(2).group("cp");
  const Seq s = uniform_seq();
  const Tol7 tol = tol_at_7(s, {4.0, 1.0}, std::log(7.0));
  for (bool zigzag : {false, true}) {
    for (bool ring : {true, false}) {
      SCOPED_TRACE(std::string(zigzag ? "zigzag" : "halves") + (ring ? " ring" : " all-gather"));
      const Local l = attend(s, rows_of(zigzag, cp.rank()), cp, ring);
      const int64_t i = find(l.pos, 7);
      // Halves: card 1 holds position 7 (seed: 卡1处理查询位置7); zigzag: card 0 (chunk 3).
      EXPECT_EQ(i >= 0, cp.rank() == (zigzag ? 0 : 1));
      if (i < 0) continue;
      EXPECT_TRUE(
          testing::within_bound(l.out[i * kD], 4.0, tol.out[0], "mean of 1..7"));  // mean of positions 1..7
      EXPECT_TRUE(testing::within_bound(l.out[i * kD + 1], 1.0, tol.out[1], "mean of ones"));
      EXPECT_TRUE(testing::within_bound(l.lse[i], std::log(7.0), tol.lse, "lse log 7"));
    }
  }
}

TEST(Seed003, OwnHalfAloneIsADifferentAttention) {
  // Card 1 with only its own keys 5..8 (plain local attention, no CP exchange).
  const Seq s = uniform_seq();
  const std::vector<int32_t> pos = {5, 6, 7, 8};
  const AttentionDims d{1, 4, 4, 1, 1, kD, kD, kD, kD};
  std::vector<float> out(4 * kD), lse(4);
  attention_forward(out.data(), lse.data(), s.q.data() + 4 * kD, s.k.data() + 4 * kD, s.v.data() + 4 * kD,
                    pos.data(), pos.data(), d);
  // All scores 0 (q = 0): exp_vec(0) = 1 exactly and the sums are exact, so
  // out = 18 · fl(1/3) within 2u (the reciprocal, the product), lse =
  // fl(log 3) within 2u (float log within an ulp).
  EXPECT_TRUE(testing::within_bound(out[2 * kD], 6.0, 2 * testing::kU32 * 6.0,
                                    "own half"));  // (5 + 6 + 7) / 3, not 4
  EXPECT_TRUE(
      testing::within_bound(lse[2], std::log(3.0), 2 * testing::kU32 * std::log(3.0), "own half lse"));
}

TEST(Seed003, RandomValuesAtPosition7MatchSoftmaxOver1To7) {
  Group cp = test::cp_mesh(2).group("cp");
  const Seq s = random_seq();
  double want_lse = 0;
  const std::vector<double> want = by_hand_at_7(s, &want_lse);
  const Tol7 tol = tol_at_7(s, want, want_lse);
  for (bool zigzag : {false, true}) {
    for (bool ring : {true, false}) {
      SCOPED_TRACE(std::string(zigzag ? "zigzag" : "halves") + (ring ? " ring" : " all-gather"));
      const Local l = attend(s, rows_of(zigzag, cp.rank()), cp, ring);
      const int64_t i = find(l.pos, 7);
      if (i < 0) continue;
      EXPECT_TRUE(testing::within_bound(l.out[i * kD], want[0], tol.out[0], "random out 0"));
      EXPECT_TRUE(testing::within_bound(l.out[i * kD + 1], want[1], tol.out[1], "random out 1"));
      EXPECT_TRUE(testing::within_bound(l.lse[i], want_lse, tol.lse, "random lse"));
    }
  }
}

}  // namespace
}  // namespace mt

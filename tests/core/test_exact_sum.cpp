// The canonical mode's order-free sums (core/exact_sum.h), against references
// computed independently: integer arithmetic on values chosen to be exactly
// representable, __float128 sums, and the tree written out by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/exact_sum.h"

namespace mt {
namespace {

TEST(ExactSum, CancellationThatDoubleAdditionLoses) {
  ExactSum s;
  s.add(1e16);
  s.add(1.0);
  s.add(-1e16);
  EXPECT_EQ(s.value(), 1.0);  // double addition in this order gives 0
  ExactSum t;
  t.add(0x1p1000);
  t.add(0x1p-1000);
  t.add(-0x1p1000);
  EXPECT_EQ(t.value(), 0x1p-1000);
  ExactSum u;
  u.add(std::ldexp(1.0, -1074));  // the smallest subnormal, twice
  u.add(std::ldexp(1.0, -1074));
  EXPECT_EQ(u.value(), std::ldexp(1.0, -1073));
  ExactSum nan;
  nan.add(1.0);
  nan.add(std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(nan.value()));
  ExactSum neg;
  neg.add(-3.5);
  neg.add(1.25);
  EXPECT_EQ(neg.value(), -2.25);
}

TEST(ExactSum, RoundsTheExactTotalOnce) {
  // 1 + 2^-53 + 2^-105: the exact total lies just above the midpoint between
  // 1 and its successor, so it rounds up; any order of double additions gives 1.
  ExactSum s;
  s.add(1.0);
  s.add(0x1p-53);
  s.add(0x1p-105);
  EXPECT_EQ(s.value(), 1.0 + 0x1p-52);
  ExactSum tie;  // exactly the midpoint: ties to even (1)
  tie.add(1.0);
  tie.add(0x1p-53);
  EXPECT_EQ(tie.value(), 1.0);
}

// Squares of random floats over a wide range: the same bits in any order and
// any split into merged or limb-summed parts, and the value of a __float128 sum.
TEST(ExactSum, SquaresInAnyOrderAndSplitAreTheSameBits) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> expo(-40, 40);
  std::vector<float> x(5000);
  for (float& v : x)
    v = std::ldexp(mant(rng), expo(rng));
  ExactSum whole;
  whole.add_squares(x.data(), static_cast<int64_t>(x.size()));
  __extension__ typedef __float128 f128;
  f128 ref = 0;
  for (float v : x)
    ref += static_cast<f128>(v) * static_cast<f128>(v);
  EXPECT_EQ(whole.value(), static_cast<double>(ref));  // 113 bits cover this range's sum exactly enough
  std::vector<float> y = x;
  std::shuffle(y.begin(), y.end(), rng);
  ExactSum a, b;
  a.add_squares(y.data(), 1234);
  b.add_squares(y.data() + 1234, static_cast<int64_t>(y.size()) - 1234);
  ExactSum merged = a;
  merged.merge(b);
  EXPECT_EQ(merged.value(), whole.value());
  int64_t* la = a.words();  // the words summed as integers, as an all-reduce over ranks does
  const int64_t* lb = b.words();
  for (int i = 0; i < ExactSum::kWords; ++i)
    la[i] += lb[i];
  a.normalise();
  EXPECT_EQ(a.value(), whole.value());
  double naive = 0, naive_shuffled = 0;  // the orders double addition would depend on
  for (float v : x)
    naive += static_cast<double>(v) * v;
  for (float v : y)
    naive_shuffled += static_cast<double>(v) * v;
  EXPECT_NE(naive, naive_shuffled) << "data too tame: double sums agree in both orders";
}

// add_squares sums squares by exponent as integers (exact_sum.cpp); the
// reference adds each square alone through add(). Over 3 blocks of 2^16, every
// exponent (subnormals and the largest floats included), and a block of 2^16
// squares of the largest mantissa at one exponent (each bucket's sum just
// under 2^64): the same words, so the same total.
TEST(ExactSum, SquaresByExponentEqualEachSquareAddedAlone) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits(0, 0xff7fffffu);  // every finite float, both signs' magnitudes
  std::vector<float> x(3 * 65536 + 123);
  for (float& v : x) {
    uint32_t b = bits(rng) | (rng() & 0x80000000u);
    if ((b & 0x7f800000u) == 0x7f800000u) b &= 0x807fffffu;  // keep it finite
    std::memcpy(&v, &b, sizeof(v));
  }
  x[5] = 0.0f;
  x[6] = -0.0f;
  x[7] = std::numeric_limits<float>::denorm_min();
  x[8] = std::numeric_limits<float>::max();
  std::vector<float> worst(65536, std::nextafter(2.0f, 0.0f));  // mantissa 2^24 − 1
  for (const std::vector<float>* data : {&x, &worst}) {
    ExactSum fast, alone;
    fast.add_squares(data->data(), static_cast<int64_t>(data->size()));
    for (float v : *data)
      alone.add(static_cast<double>(v) * v);
    const int64_t* a = fast.words();
    const int64_t* b = alone.words();
    EXPECT_EQ(0, std::memcmp(a, b, ExactSum::kWords * sizeof(int64_t))) << data->size() << " squares";
    EXPECT_EQ(fast.value(), alone.value());
  }
  std::vector<float> with_inf = {1.0f, std::numeric_limits<float>::infinity(), 2.0f};
  ExactSum s;
  s.add_squares(with_inf.data(), 3);
  EXPECT_TRUE(std::isnan(s.value()));
}

TEST(CanonicalTree, SixLeavesAsWrittenOut) {
  // Leaves chosen so that each grouping rounds differently in float.
  const std::vector<float> l = {1e8f, 3.0f, -1e8f, 5.0f, 0.1f, 7.0f};
  const float expected = ((l[0] + l[1]) + (l[2] + l[3])) + (l[4] + l[5]);
  for (int order = 0; order < 2; ++order) {  // ascending, then descending insertion
    std::vector<float> v = l;
    CanonicalTree<int> tree(6);
    auto add = [&](int& a, int& b) { v[static_cast<size_t>(a)] += v[static_cast<size_t>(b)]; };
    auto release = [](int) {};
    for (int i = 0; i < 6; ++i) {
      const int leaf = order == 0 ? i : 5 - i;
      tree.insert(leaf, leaf, add, release);
    }
    const int root = tree.finish(add, release);
    EXPECT_EQ(v[static_cast<size_t>(root)], expected) << "order " << order;
  }
  // Over ranks: 3 blocks of 2 leaves each reduce to the same tree.
  const std::vector<float> blocks = {l[0] + l[1], l[2] + l[3], l[4] + l[5]};
  float out = 0;
  sum_in_tree_order(&out, blocks.data(), 3, 1);
  EXPECT_EQ(out, expected);
}

TEST(CanonicalTree, RanksOfAlignedBlocksAreSubtrees) {
  // 7 ranks × 4 leaves: the tree over 28 leaves equals the tree over the 7
  // ranks' 4-leaf subtrees, element by element, on data where orders differ.
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  const int P = 7, A = 4;
  const int64_t n = 257;
  std::vector<float> leaves(static_cast<size_t>(P * A * n));
  for (float& v : leaves)
    v = d(rng) * std::ldexp(1.0f, static_cast<int>(rng() % 20));
  std::vector<float> whole(static_cast<size_t>(n)), roots(static_cast<size_t>(P * n)),
      over(static_cast<size_t>(n));
  sum_in_tree_order(whole.data(), leaves.data(), P * A, n);
  for (int r = 0; r < P; ++r)
    sum_in_tree_order(roots.data() + r * n, leaves.data() + static_cast<int64_t>(r) * A * n, A, n);
  sum_in_tree_order(over.data(), roots.data(), P, n);
  EXPECT_EQ(0, std::memcmp(whole.data(), over.data(), whole.size() * sizeof(float)));
  std::vector<float> seq(static_cast<size_t>(n), 0.0f);  // the left fold differs somewhere
  for (int i = 0; i < P * A; ++i)
    for (int64_t k = 0; k < n; ++k)
      seq[static_cast<size_t>(k)] += leaves[static_cast<size_t>(i * n + k)];
  EXPECT_NE(0, std::memcmp(whole.data(), seq.data(), whole.size() * sizeof(float)));
}

}  // namespace
}  // namespace mt

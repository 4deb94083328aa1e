#include "core/exact_sum.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace mt {

namespace {

__extension__ typedef unsigned __int128 u128;  // GCC and Clang: the 85-bit shifted mantissa

constexpr int64_t kDigit = int64_t{1} << 32;
constexpr int64_t kMask = kDigit - 1;
constexpr int64_t kNormaliseEvery = int64_t{1} << 30;  // limbs grow by < 2^32 per addition: int64 holds 2^31

}  // namespace

void ExactSum::clear() {
  std::memset(limb_, 0, sizeof(limb_));
  pending_ = 0;
}

void ExactSum::add_mantissa(int64_t mantissa, int position) {
  const int i = position / 32, shift = position % 32;
  const bool negative = mantissa < 0;
  const auto m = static_cast<u128>(negative ? -mantissa : mantissa) << shift;  // < 2^85
  const auto d0 = static_cast<int64_t>(m & kMask), d1 = static_cast<int64_t>((m >> 32) & kMask),
             d2 = static_cast<int64_t>(m >> 64);
  if (negative) {
    limb_[i] -= d0;
    limb_[i + 1] -= d1;
    limb_[i + 2] -= d2;
  } else {
    limb_[i] += d0;
    limb_[i + 1] += d1;
    limb_[i + 2] += d2;
  }
  if (++pending_ >= kNormaliseEvery) normalise();
}

void ExactSum::add(double x) {
  if (!std::isfinite(x)) {
    ++limb_[kLimbs];
    return;
  }
  if (x == 0.0) return;
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof(bits));
  const int biased = static_cast<int>((bits >> 52) & 0x7ff);
  auto mantissa = static_cast<int64_t>(bits & ((uint64_t{1} << 52) - 1));
  int exponent = biased - 1075;  // x = mantissa · 2^exponent
  if (biased == 0) {
    exponent = -1074;  // subnormal: no implicit bit
  } else {
    mantissa |= int64_t{1} << 52;
  }
  add_mantissa((bits >> 63) != 0 ? -mantissa : mantissa, exponent - kLowBit);
}

// A float is m · 2^(max(E, 1) − 150) for its biased exponent E and m its 24-bit
// mantissa (no implicit bit when E = 0), so its square is m² · 2^(2·max(E, 1) − 300)
// with m² < 2^48: the squares of one exponent are summed as integers, up to 2^16 of
// them in a uint64, and each bucket's sum is added to the limbs once per block.
// Integer sums are exact, so this is the same total as adding every square alone.
void ExactSum::add_squares(const float* x, int64_t n) {
  constexpr int64_t kBlock = int64_t{1} << 16;  // 2^16 · (2^48 − 1) < 2^64
  constexpr int kLanes = 4;                     // independent buckets: no store-to-load chain
  uint64_t bucket[kLanes][256];
  for (int64_t at = 0; at < n; at += kBlock) {
    const int64_t end = std::min(n, at + kBlock);
    std::memset(bucket, 0, sizeof(bucket));
    int64_t non_finite = 0;
    int64_t i = at;
    auto one = [&](int lane, float v) {
      uint32_t bits = 0;
      std::memcpy(&bits, &v, sizeof(bits));
      const uint32_t e = (bits >> 23) & 0xff;
      const uint64_t m = (bits & 0x7fffff) | (uint64_t{e != 0} << 23);
      bucket[lane][e] += m * m;
      non_finite += e == 0xff;
    };
    for (; i + kLanes <= end; i += kLanes)
      for (int l = 0; l < kLanes; ++l)
        one(l, x[i + l]);
    for (; i < end; ++i)
      one(0, x[i]);
    limb_[kLimbs] += non_finite;
    for (int e = 0; e < 0xff; ++e) {
      uint64_t sum = 0;
      for (int l = 0; l < kLanes; ++l)
        sum += bucket[l][e];
      if (sum == 0) continue;
      const int position = 2 * std::max(e, 1) - 300 - kLowBit;
      add_mantissa(static_cast<int64_t>(sum & kMask), position);
      add_mantissa(static_cast<int64_t>(sum >> 32), position + 32);
    }
  }
}

void ExactSum::merge(const ExactSum& other) {
  ExactSum o = other;
  o.normalise();
  normalise();
  for (int i = 0; i < kWords; ++i)
    limb_[i] += o.limb_[i];
  normalise();
}

void ExactSum::normalise() {
  int64_t carry = 0;
  for (int i = 0; i < kLimbs - 1; ++i) {
    const int64_t v = limb_[i] + carry;
    carry = v >> 32;  // arithmetic shift: floor division, so the digit is in [0, 2^32)
    limb_[i] = v & kMask;
  }
  limb_[kLimbs - 1] += carry;  // the sign and what is above
  pending_ = 0;
}

double ExactSum::value() const {
  if (limb_[kLimbs] > 0) return std::nan("");
  ExactSum t = *this;
  t.normalise();
  const bool negative = t.limb_[kLimbs - 1] < 0;
  if (negative) {  // the magnitude: negate every limb, then carry
    for (int i = 0; i < kLimbs; ++i)
      t.limb_[i] = -t.limb_[i];
    t.normalise();
  }
  int h = kLimbs - 1;
  while (h >= 0 && t.limb_[h] == 0)
    --h;
  if (h < 0) return 0.0;
  // The top three digits (at least 65 bits when h ≥ 2), the rest as a sticky bit
  // below them: one correctly rounded conversion.
  u128 top = 0;
  const int lo = h >= 2 ? h - 2 : 0;
  for (int i = h; i >= lo; --i)
    top = (top << 32) | static_cast<uint64_t>(t.limb_[i]);
  bool sticky = false;
  for (int i = 0; i < lo; ++i)
    sticky = sticky || t.limb_[i] != 0;
  if (sticky) top |= 1;
  const double v = std::ldexp(static_cast<double>(top), 32 * lo + kLowBit);
  return negative ? -v : v;
}

namespace {

// The canonical tree over P leaves as a list of additions (left += right) and the root.
struct TreeOps {
  std::vector<std::pair<int, int>> adds;
  int root = 0;
};

TreeOps tree_ops(int P) {
  TreeOps ops;
  CanonicalTree<int> tree(P);
  auto add = [&](int& l, int& r) { ops.adds.emplace_back(l, r); };
  auto release = [](int) {};
  for (int r = 0; r < P; ++r)
    tree.insert(r, r, add, release);
  ops.root = tree.finish(add, release);
  return ops;
}

template <typename F>
void tree_sum(F* dst, const F* parts, int P, int64_t n) {
  const TreeOps ops = tree_ops(P);
#pragma omp parallel if (n > 65536)
  {
    std::vector<F> v(static_cast<size_t>(P));
#pragma omp for schedule(static)
    for (int64_t k = 0; k < n; ++k) {
      for (int r = 0; r < P; ++r)
        v[static_cast<size_t>(r)] = parts[static_cast<int64_t>(r) * n + k];
      for (const auto& [l, r] : ops.adds)
        v[static_cast<size_t>(l)] += v[static_cast<size_t>(r)];
      dst[k] = v[static_cast<size_t>(ops.root)];
    }
  }
}

}  // namespace

void sum_in_tree_order(float* dst, const float* parts, int P, int64_t n) {
  tree_sum(dst, parts, P, n);
}

void sum_in_tree_order(double* dst, const double* parts, int P, int64_t n) {
  tree_sum(dst, parts, P, n);
}

}  // namespace mt

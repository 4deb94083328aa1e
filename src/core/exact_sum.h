// The two order-free sums of the canonical reduction mode
// (parallel.reduction = canonical, docs/PARALLELISM.md "The canonical mode").
//
// ExactSum adds doubles without rounding: a fixed-point integer wide enough for
// every finite double (2^-1074 … 2^1024), held as 32-bit digits in int64 limbs
// so that carries can wait. Its value() is the exact total rounded once to the
// nearest double. The total does not depend on the order of the additions or
// on how they were split between accumulators — merged locally, or their limbs
// summed over ranks by any all-reduce (integer sums are associative) — so the
// loss and the gradient norm are the same bits on every layout.
//
// CanonicalTree is the one summation tree of tensors over an index (batch
// atoms, ranks): leaves 0 … n−1; the partial sums of two aligned blocks of 2^k
// leaves are added, left + right, into the block of 2^(k+1); what is left —
// the blocks of n's binary digits, largest first — is added right to left,
// s0 + (s1 + (… + s_last)). Every aligned block of 2^k leaves is a subtree, and
// the tree over n = P·2^k leaves is the tree over P blocks of 2^k, so ranks
// that hold aligned power-of-two blocks compute subtrees and a reduction over
// ranks by the same tree completes the same sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace mt {

class ExactSum {
 public:
  // 32-bit digits: bit 0 of limb 0 weighs 2^kLowBit; the top limb carries the sign.
  static constexpr int kLowBit = -1074 - 64;  // room below the smallest subnormal's mantissa
  static constexpr int kLimbs = 70;           // up to 2^(kLowBit + 32·70) = 2^1102: headroom above 2^1024
  // What a sum over ranks adds: the limbs, then the count of non-finite terms.
  static constexpr int kWords = kLimbs + 1;

  ExactSum() { clear(); }
  void clear();
  // A non-finite term is counted, not added: value() is then NaN.
  void add(double x);
  // Σ x[i]² (each square exact in double: 24-bit mantissas).
  void add_squares(const float* x, int64_t n);
  void merge(const ExactSum& other);
  // The kWords words, normalised, for a sum over ranks as int64 (Group::all_reduce
  // with ElemType::i64): after it, call normalise() before value().
  int64_t* words() {
    normalise();
    return limb_;
  }
  void normalise();
  // The exact total rounded to the nearest double (ties to even); NaN after a non-finite term.
  double value() const;

 private:
  void add_mantissa(int64_t mantissa, int position);  // mantissa · 2^(position + kLowBit), |mantissa| < 2^53
  int64_t limb_[kWords];                              // limb_[kLimbs]: the non-finite terms
  int64_t pending_ = 0;  // additions since the last normalise (each adds < 2^32 to a limb)
};

// The canonical tree's partial sums, kept by position. Leaves may arrive in
// any order; sibling blocks are combined as soon as both exist; finish()
// collapses what is left. T is any handle the add callback understands
// (a buffer index, a pointer): add(left, right) must leave left + right in left.
template <typename T>
class CanonicalTree {
 public:
  struct Node {
    int level = 0;      // the block holds 2^level leaves
    int64_t first = 0;  // its first leaf
    T value{};
  };

  explicit CanonicalTree(int64_t leaves = 0) : leaves_(leaves) {}
  void reset(int64_t leaves) {
    leaves_ = leaves;
    nodes_.clear();
    inserted_ = 0;
  }
  int64_t inserted() const { return inserted_; }
  bool complete() const { return inserted_ == leaves_; }
  const std::vector<Node>& nodes() const { return nodes_; }

  // Inserts leaf `index`; `release(value)` hands back the right operand of each addition.
  template <typename Add, typename Release>
  void insert(int64_t index, T value, Add&& add, Release&& release) {
    Node cur{0, index, value};
    ++inserted_;
    for (;;) {
      const int64_t size = int64_t{1} << cur.level;
      const int64_t sibling = (cur.first / size) % 2 == 0 ? cur.first + size : cur.first - size;
      if (sibling < 0 || sibling + size > leaves_) break;  // the sibling block lies outside [0, leaves)
      auto it = find(cur.level, sibling);
      if (it == nodes_.end()) break;
      Node other = *it;
      nodes_.erase(it);
      Node& left = cur.first < other.first ? cur : other;
      Node& right = cur.first < other.first ? other : cur;
      add(left.value, right.value);
      release(right.value);
      cur = Node{left.level + 1, left.first, left.value};
    }
    nodes_.push_back(cur);
  }

  // After every leaf: the remaining blocks, added right to left; returns the root.
  template <typename Add, typename Release>
  T finish(Add&& add, Release&& release) {
    std::vector<Node> left = nodes_;
    for (std::size_t i = 0; i < left.size(); ++i)  // by first leaf (few nodes: insertion sort)
      for (std::size_t j = i + 1; j < left.size(); ++j)
        if (left[j].first < left[i].first) std::swap(left[i], left[j]);
    nodes_.clear();
    T acc = left.back().value;
    for (std::size_t i = left.size() - 1; i-- > 0;) {
      add(left[i].value, acc);  // s_i + (s_{i+1} + …)
      release(acc);
      acc = left[i].value;
    }
    return acc;
  }

 private:
  typename std::vector<Node>::iterator find(int level, int64_t first) {
    for (auto it = nodes_.begin(); it != nodes_.end(); ++it)
      if (it->level == level && it->first == first) return it;
    return nodes_.end();
  }

  int64_t leaves_ = 0;
  int64_t inserted_ = 0;
  std::vector<Node> nodes_;
};

// dst[k] = the canonical tree over the P parts parts[r·n + k] (r = 0 … P−1), for
// a sum over ranks (comm/ranked_sum.h, SumOrder::tree); f32 or f64.
void sum_in_tree_order(float* dst, const float* parts, int P, int64_t n);
void sum_in_tree_order(double* dst, const double* parts, int P, int64_t n);

}  // namespace mt

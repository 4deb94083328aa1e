// The cp pieces of the weight gradients (contracts in the header).
#include "parallel/cp_pieces.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/exact_sum.h"
#include "ops/gemm.h"
#include "ops/primitives.h"

namespace mt::cp {

void pieces_weight_grad(float* dw, float* slots, const float* dout, const float* inp, int64_t N, int64_t IC,
                        int64_t OC, int64_t k) {
  MT_CHECK(k >= 1 && N % k == 0 && slots != nullptr, "cp pieces: ", N, " rows are not ", k,
           " pieces, or the scratch is not bound");
  const int64_t n = N / k, w = OC * IC;
  for (int64_t j = 0; j < k; ++j) {
    float* leaf = slots + j * w;
    std::memset(leaf, 0, static_cast<size_t>(w) * sizeof(float));
    // The same call (into zeros) a rank holding only piece j makes into its zeroed gradient.
    linear_backward(nullptr, leaf, dout + j * n * OC, inp + j * n * IC, nullptr, n, IC, OC);
  }
  sum_in_tree_order(slots, slots, static_cast<int>(k), w);  // the root in the first leaf
  add(dw, slots, w);
}

void pieces_embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                               int64_t k) {
  MT_CHECK(k >= 1 && N % k == 0, "cp pieces: ", N, " tokens are not ", k, " pieces");
  const int64_t n = N / k;
  // The tokens by id, each id's in token order: one row's leaves at a time.
  std::vector<int64_t> order(static_cast<size_t>(N));
  std::iota(order.begin(), order.end(), int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids[a] < ids[b]; });
  std::vector<float> leaves(static_cast<size_t>(k * C));
  for (size_t i = 0; i < order.size();) {
    const int32_t id = ids[order[i]];
    std::fill(leaves.begin(), leaves.end(), 0.0f);
    for (; i < order.size() && ids[order[i]] == id; ++i) {
      const int64_t t = order[i];
      float* leaf = leaves.data() + (t / n) * C;
      const float* g = dout + t * C;
      for (int64_t c = 0; c < C; ++c)
        leaf[c] += g[c];
    }
    sum_in_tree_order(leaves.data(), leaves.data(), static_cast<int>(k), C);
    float* row = dtable + static_cast<int64_t>(id) * C;
    for (int64_t c = 0; c < C; ++c)
      row[c] += leaves[static_cast<size_t>(c)];
  }
}

}  // namespace mt::cp

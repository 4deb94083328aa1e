// The GEMM invariances the canonical mode relies on (docs/PARALLELISM.md "The
// canonical mode"), checked on whatever host and OpenBLAS kernel this runs,
// with its products in fixed row blocks (set_fixed_gemm_blocks, as the mode
// sets them):
//   - the same product at the same shapes is the same bits whatever the
//     thread count, so one process at 2 threads computes what a rank at 1
//     computes. OpenBLAS's own threading does not give that: it cuts M and N
//     by the thread count and computes the elements at a cut with its edge
//     kernels (on an AMD EPYC Zen 5 host the 130 × 48 × 300 shape below
//     differs between 1 and 2 threads in every one of the three products);
//   - the same bits when its operands sit at another address (the executor's
//     slots and the canonical store's leaves move).
// What the mode does NOT rely on is not asserted: whether the rows (columns)
// of a product are the same bits when it is computed with more or fewer rows
// (columns) — true of OpenBLAS sgemm on the hosts measured except at M = 1, a
// GEMV path (issue 23). In the canonical mode every layout multiplies each
// microbatch with the same shapes, so neither is needed; a canonical form that
// cuts a product differently by layout must first assert here the invariance
// it needs.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/exact_sum.h"
#include "core/threads.h"
#include "ops/gemm.h"
#include "ops/optimizer_kernels.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::random_floats;

struct Shape {
  int64_t N, IC, OC;  // tokens, input and output features (linear_forward's names)
};
// The tiny test model's and the benchmark model's linear shapes, and an awkward one.
const Shape kShapes[] = {{16, 32, 96}, {130, 48, 300}, {256, 512, 1376}, {64, 1376, 512}};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// out = inp · Wᵀ, dinp = dout · W, dW = doutᵀ · inp at `threads` threads.
struct Products {
  std::vector<float> out, dinp, dweight;
};
Products products(const Shape& s, const std::vector<float>& inp, const std::vector<float>& w,
                  const std::vector<float>& dout, int threads) {
  const int before = num_threads();
  set_num_threads(threads);
  Products p{std::vector<float>(static_cast<size_t>(s.N * s.OC)),
             std::vector<float>(static_cast<size_t>(s.N * s.IC)),
             std::vector<float>(static_cast<size_t>(s.OC * s.IC), 0.0f)};
  linear_forward(p.out.data(), inp.data(), w.data(), s.N, s.IC, s.OC);
  linear_backward(p.dinp.data(), p.dweight.data(), dout.data(), inp.data(), w.data(), s.N, s.IC, s.OC);
  set_num_threads(before);
  return p;
}

TEST(GemmInvariance, SameShapesSameBitsAtAnyThreadCount) {
  for (const Shape& s : kShapes) {
    const auto inp = random_floats(s.N * s.IC, 1), w = random_floats(s.OC * s.IC, 2),
               dout = random_floats(s.N * s.OC, 3);
    const FixedGemmBlocksGuard fixed(true);
    const Products one = products(s, inp, w, dout, 1);
    for (int threads : {2, 3}) {
      const Products p = products(s, inp, w, dout, threads);
      EXPECT_TRUE(same_bits(one.out, p.out)) << s.N << "x" << s.IC << "x" << s.OC << " forward, " << threads;
      EXPECT_TRUE(same_bits(one.dinp, p.dinp)) << s.N << "x" << s.IC << "x" << s.OC << " dX, " << threads;
      EXPECT_TRUE(same_bits(one.dweight, p.dweight))
          << s.N << "x" << s.IC << "x" << s.OC << " dW, " << threads;
    }
  }
}

TEST(GemmInvariance, SameShapesSameBitsAtAnotherAddress) {
  for (const Shape& s : kShapes) {
    const FixedGemmBlocksGuard fixed(true);
    const auto inp = random_floats(s.N * s.IC, 4), w = random_floats(s.OC * s.IC, 5);
    std::vector<float> a(static_cast<size_t>(s.N * s.OC));
    linear_forward(a.data(), inp.data(), w.data(), s.N, s.IC, s.OC);
    for (int64_t shift : {1, 3, 16}) {  // the input and output at offsets of 4, 12 and 64 bytes
      std::vector<float> inp2(inp.size() + static_cast<size_t>(shift)),
          out2(a.size() + static_cast<size_t>(shift));
      std::copy(inp.begin(), inp.end(), inp2.begin() + shift);
      linear_forward(out2.data() + shift, inp2.data() + shift, w.data(), s.N, s.IC, s.OC);
      EXPECT_EQ(0, std::memcmp(a.data(), out2.data() + shift, a.size() * sizeof(float)))
          << s.N << "x" << s.IC << "x" << s.OC << " at offset " << shift;
    }
  }
}

// The gradient norm's exact sum of squares (ops/optimizer_kernels.h) cuts its
// range by the thread count and merges the threads' accumulators: the same
// words at 1, 2 and 3 threads as one accumulator over the whole range.
TEST(ExactSumSquares, SameWordsAtAnyThreadCount) {
  const auto g = random_floats(1'000'003, 6);
  ExactSum whole;
  whole.add_squares(g.data(), static_cast<int64_t>(g.size()));
  const int before = num_threads();
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    ExactSum acc;
    exact_sum_squares(acc, g.data(), static_cast<int64_t>(g.size()));
    EXPECT_EQ(0, std::memcmp(acc.words(), whole.words(), ExactSum::kWords * sizeof(int64_t))) << threads;
  }
  set_num_threads(before);
}

}  // namespace
}  // namespace mt

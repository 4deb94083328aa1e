// Blockwise attention (ops/attention.h) against the double-precision reference
// (ops/attention_reference.h), and both backwards against central finite
// differences of the reference forward.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "attention_problem.h"
#include "core/error.h"
#include "core/threads.h"

namespace mt {
namespace {

using namespace attention_test;

struct Shape {
  const char* name;
  int64_t B, T, H, KV, D;
  bool fused;
  int64_t pad;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << s.name;
}

class AttentionShapes : public ::testing::TestWithParam<Shape> {};

// Forward (out and lse) and backward (into prefilled gradients) against the reference.
TEST_P(AttentionShapes, MatchesDoubleReference) {
  const Shape s = GetParam();
  const Problem p = make_problem(s.B, s.T, s.T, s.H, s.KV, s.D, s.fused, s.pad);
  const std::vector<float> x = random_vec(p.n_in, 1, 1.5f);
  const std::vector<float> dout = random_vec(p.n_out(), 2);
  const std::vector<float> prefill = random_vec(p.n_in, 3);

  std::vector<float> out, lse;
  std::vector<double> out_ref, lse_ref;
  fast_forward(p, x, out, lse);
  ref_forward(p, to_double(x), out_ref, lse_ref);
  expect_close(out, out_ref, 5e-5, "out");
  expect_close(lse, lse_ref, 5e-6, "lse");

  std::vector<float> gx = prefill;
  std::vector<double> gx_ref = to_double(prefill);
  fast_backward(p, x, dout, out, lse, gx);
  ref_backward(p, to_double(x), to_double(dout), out_ref, lse_ref, gx_ref);
  expect_close(gx, gx_ref, 5e-5, "dq, dk, dv");
}

INSTANTIATE_TEST_SUITE_P(Attention, AttentionShapes,
                         ::testing::Values(Shape{"T1", 2, 1, 4, 1, 2, true, 0},
                                           Shape{"T37_H4_KV1_D6", 2, 37, 4, 1, 6, true, 0},
                                           Shape{"T67_H6_KV2_D64", 2, 67, 6, 2, 64, true, 0},
                                           Shape{"T130_H4_KV4_D64", 1, 130, 4, 4, 64, false, 0},
                                           Shape{"T130_H6_KV2_D6_fused", 2, 130, 6, 2, 6, true, 3},
                                           Shape{"T64_H2_KV1_D2_padded", 1, 64, 2, 1, 2, false, 5},
                                           Shape{"T200_H2_KV2_D64", 1, 200, 2, 2, 64, false, 1}),
                         [](const ::testing::TestParamInfo<Shape>& param_info) {
                           return std::string(param_info.param.name);
                         });

// Both backwards against central finite differences of the double reference
// forward, loss = Σ r·out: one FD gradient checks dq, dk and dv together, and
// the padding columns of the fused buffer get no gradient.
void check_against_finite_differences(const Problem& p) {
  const std::vector<float> x = random_vec(p.n_in, 11, 1.5f);
  const std::vector<float> r = random_vec(p.n_out(), 12);
  const std::vector<float> prefill = random_vec(p.n_in, 13);
  const std::vector<double> rd = to_double(r);
  auto loss = [&](const std::vector<double>& xd) {
    std::vector<double> o, l;
    ref_forward(p, xd, o, l);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i)
      s += rd[i] * o[i];  // padding holds a constant
    return s;
  };
  const std::vector<double> fd = numeric_grad(loss, to_double(x));
  std::vector<double> expected(fd.size());
  for (size_t i = 0; i < fd.size(); ++i)
    expected[i] = prefill[i] + fd[i];

  std::vector<float> out, lse;
  fast_forward(p, x, out, lse);
  std::vector<float> gx = prefill;
  fast_backward(p, x, r, out, lse, gx);
  expect_close(gx, expected, 5e-5, "fast backward vs finite differences");

  std::vector<double> out_ref, lse_ref;
  ref_forward(p, to_double(x), out_ref, lse_ref);
  std::vector<double> gx_ref = to_double(prefill);
  ref_backward(p, to_double(x), rd, out_ref, lse_ref, gx_ref);
  expect_close(gx_ref, expected, 1e-7, "reference backward vs finite differences");
}

TEST(Attention, BackwardMatchesFiniteDifferencesT1) {
  check_against_finite_differences(make_problem(2, 1, 1, 4, 1, 2, true));
}
TEST(Attention, BackwardMatchesFiniteDifferencesGqaFused) {
  check_against_finite_differences(make_problem(2, 37, 37, 6, 2, 2, true, 1));
}
TEST(Attention, BackwardMatchesFiniteDifferencesTwoTiles) {
  check_against_finite_differences(make_problem(1, 70, 70, 2, 1, 6, false));
}
TEST(Attention, BackwardMatchesFiniteDifferencesHeadDim64) {
  check_against_finite_differences(make_problem(1, 9, 9, 2, 2, 64, true));
}
TEST(Attention, BackwardMatchesFiniteDifferencesQueriesAfterKeys) {
  // Queries at positions 4..7 against keys at 0..7 (a later chunk of the sequence).
  check_against_finite_differences(make_problem(2, 4, 8, 4, 2, 6, false, 0, 4, 0));
}

TEST(Attention, QueriesAfterKeysMatchReference) {
  const Problem p = make_problem(2, 4, 8, 4, 2, 64, false, 0, 4, 0);
  const std::vector<float> x = random_vec(p.n_in, 21, 1.5f);
  std::vector<float> out, lse;
  std::vector<double> out_ref, lse_ref;
  fast_forward(p, x, out, lse);
  ref_forward(p, to_double(x), out_ref, lse_ref);
  expect_close(out, out_ref, 5e-5, "out");
  expect_close(lse, lse_ref, 5e-6, "lse");
  const std::vector<float> dout = random_vec(p.n_out(), 22);
  const std::vector<float> prefill = random_vec(p.n_in, 23);
  std::vector<float> gx = prefill;
  std::vector<double> gx_ref = to_double(prefill);
  fast_backward(p, x, dout, out, lse, gx);
  ref_backward(p, to_double(x), to_double(dout), out_ref, lse_ref, gx_ref);
  expect_close(gx, gx_ref, 5e-5, "dq, dk, dv");
}

TEST(Attention, QueryThatSeesNoKey) {
  // Keys at positions 3..12, queries at 0..9: queries 0, 1 and 2 see nothing.
  const Problem p = make_problem(2, 10, 10, 4, 2, 6, false, 0, 0, 3);
  const std::vector<float> x = random_vec(p.n_in, 31, 1.5f);
  std::vector<float> out, lse;
  fast_forward(p, x, out, lse);
  std::vector<double> out_ref, lse_ref;
  ref_forward(p, to_double(x), out_ref, lse_ref);
  expect_close(out, out_ref, 5e-5, "out");
  expect_close(lse, lse_ref, 5e-6, "lse");
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t h = 0; h < 4; ++h) {
      for (int64_t i = 0; i < 3; ++i) {
        EXPECT_EQ(lse[static_cast<size_t>((b * 4 + h) * 10 + i)], -std::numeric_limits<float>::infinity());
        for (int64_t c = 0; c < 6; ++c) {
          EXPECT_EQ(out[static_cast<size_t>((b * 10 + i) * p.d.out_stride + h * 6 + c)], 0.0f);
        }
      }
    }
  }
  const std::vector<float> dout = random_vec(p.n_out(), 32);
  const std::vector<float> prefill = random_vec(p.n_in, 33);
  std::vector<float> gx = prefill;
  fast_backward(p, x, dout, out, lse, gx);
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t i = 0; i < 3; ++i) {
      for (int64_t c = 0; c < 4 * 6; ++c) {
        const size_t at = static_cast<size_t>(p.q_off + (b * 10 + i) * p.d.q_stride + c);
        EXPECT_EQ(gx[at], prefill[at]) << "dq of a query that sees nothing";
      }
    }
  }
  check_against_finite_differences(p);
}

// Ring attention's decomposition: keys split into two blocks held in their own
// buffers. Forward per block + attention_merge (in either order) equals the full
// forward; backward per block with the FULL out/lse, dq accumulated across the
// blocks, equals the full backward.
TEST(Attention, KeyBlocksMergeAndAccumulateToFullAttention) {
  const int64_t B = 2, T = 130, H = 6, KV = 2, D = 64, split = 70;
  const Problem p = make_problem(B, T, T, H, KV, D, false, 0, 0, 2);  // queries 0 and 1 see no key
  const std::vector<float> x = random_vec(p.n_in, 41, 1.5f);
  const std::vector<float> dout = random_vec(p.n_out(), 42);
  const std::vector<float> prefill = random_vec(p.n_in, 43);
  std::vector<double> out_ref, lse_ref;
  ref_forward(p, to_double(x), out_ref, lse_ref);
  std::vector<double> gx_ref = to_double(prefill);
  ref_backward(p, to_double(x), to_double(dout), out_ref, lse_ref, gx_ref);

  struct Block {
    int64_t j0, n;
    AttentionDims d;
    std::vector<float> k, v, dk, dv, out, lse;
    std::vector<int32_t> pos;
  };
  std::vector<Block> blocks;
  const int64_t w = p.d.kv_stride;
  for (auto [j0, j1] : {std::pair<int64_t, int64_t>{0, split}, {split, T}}) {
    Block blk{j0, j1 - j0, p.d, {}, {}, {}, {}, {}, {}, {}};
    blk.d.kv_len = blk.n;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = j0; j < j1; ++j) {
        const auto row = [&](int64_t off) { return static_cast<size_t>(off + (b * T + j) * w); };
        blk.k.insert(blk.k.end(), x.begin() + row(p.k_off), x.begin() + row(p.k_off) + w);
        blk.v.insert(blk.v.end(), x.begin() + row(p.v_off), x.begin() + row(p.v_off) + w);
        blk.dk.insert(blk.dk.end(), prefill.begin() + row(p.k_off), prefill.begin() + row(p.k_off) + w);
        blk.dv.insert(blk.dv.end(), prefill.begin() + row(p.v_off), prefill.begin() + row(p.v_off) + w);
        blk.pos.push_back(p.k_pos[static_cast<size_t>(b * T + j)]);
      }
    }
    blk.out.assign(static_cast<size_t>(p.n_out()), 0.0f);
    blk.lse.assign(static_cast<size_t>(p.n_lse()), 0.0f);
    attention_forward(blk.out.data(), blk.lse.data(), x.data() + p.q_off, blk.k.data(), blk.v.data(),
                      p.q_pos.data(), blk.pos.data(), blk.d);
    blocks.push_back(std::move(blk));
  }

  for (int first : {0, 1}) {  // the second block is invisible to the first 68 queries: −inf on either side
    std::vector<float> out = blocks[first].out, lse = blocks[first].lse;
    attention_merge(out.data(), lse.data(), blocks[1 - first].out.data(), blocks[1 - first].lse.data(), p.d);
    expect_close(out, out_ref, 5e-5, "merged out, first block " + std::to_string(first));
    expect_close(lse, lse_ref, 5e-6, "merged lse, first block " + std::to_string(first));
  }

  std::vector<float> out, lse;
  fast_forward(p, x, out, lse);
  std::vector<float> gx = prefill;
  for (Block& blk : blocks) {
    attention_backward(gx.data() + p.q_off, blk.dk.data(), blk.dv.data(), dout.data(), out.data(), lse.data(),
                       x.data() + p.q_off, blk.k.data(), blk.v.data(), p.q_pos.data(), blk.pos.data(), blk.d);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < blk.n; ++j) {
        const auto src = static_cast<size_t>((b * blk.n + j) * w);
        const auto dst = static_cast<size_t>((b * T + blk.j0 + j) * w);
        std::copy_n(blk.dk.begin() + src, w, gx.begin() + p.k_off + dst);
        std::copy_n(blk.dv.begin() + src, w, gx.begin() + p.v_off + dst);
      }
    }
  }
  expect_close(gx, gx_ref, 5e-5, "blockwise dq, dk, dv");
}

// The backward picks one task per (batch, kv head) when there are enough, else
// separate dk/dv and dq tasks; both keep one writer per element and a fixed
// summation order, so the gradients are bit-identical for any thread count.
TEST(Attention, SameBitsForAnyThreadCount) {
  const Problem p = make_problem(2, 130, 130, 4, 1, 64, true);
  const std::vector<float> x = random_vec(p.n_in, 61, 1.5f);
  const std::vector<float> dout = random_vec(p.n_out(), 62);
  const int saved = num_threads();
  std::vector<std::vector<float>> outs, grads;
  for (int threads : {1, 2, 4}) {
    set_num_threads(threads);
    std::vector<float> out, lse, gx(static_cast<size_t>(p.n_in), 0.5f);
    fast_forward(p, x, out, lse);
    fast_backward(p, x, dout, out, lse, gx);
    outs.push_back(out);
    grads.push_back(gx);
  }
  set_num_threads(saved);
  for (size_t i = 1; i < outs.size(); ++i) {
    EXPECT_TRUE(outs[i] == outs[0]) << "forward, run " << i;
    EXPECT_TRUE(grads[i] == grads[0]) << "backward, run " << i;
  }
  std::vector<double> out_ref, lse_ref;
  ref_forward(p, to_double(x), out_ref, lse_ref);
  std::vector<double> gx_ref(static_cast<size_t>(p.n_in), 0.5);
  ref_backward(p, to_double(x), to_double(dout), out_ref, lse_ref, gx_ref);
  expect_close(grads[0], gx_ref, 5e-5, "dq, dk, dv");
}

TEST(Attention, MergeOfTwoEmptyPartsStaysEmpty) {
  const AttentionDims d{1, 1, 1, 1, 1, 2, 2, 2, 2};
  const float inf = std::numeric_limits<float>::infinity();
  float out[2] = {0.0f, 0.0f}, lse[1] = {-inf};
  const float part[2] = {0.0f, 0.0f}, lse_part[1] = {-inf};
  attention_merge(out, lse, part, lse_part, d);
  EXPECT_EQ(lse[0], -inf);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  // Equal weights: lse = log(e^1 + e^1) = 1 + log 2, out = the mean.
  float out2[2] = {1.0f, 3.0f}, lse2[1] = {1.0f};
  const float part2[2] = {3.0f, 5.0f}, lse_part2[1] = {1.0f};
  attention_merge(out2, lse2, part2, lse_part2, d);
  EXPECT_NEAR(lse2[0], 1.0 + std::log(2.0), 1e-6);
  EXPECT_NEAR(out2[0], 2.0f, 1e-6);
  EXPECT_NEAR(out2[1], 4.0f, 1e-6);
}

TEST(Attention, RejectsBadDims) {
  const Problem p = make_problem(1, 4, 4, 6, 4, 2, false);  // 6 heads over 4 kv heads
  const std::vector<float> x(static_cast<size_t>(p.n_in), 0.0f);
  std::vector<float> out, lse;
  EXPECT_THROW(fast_forward(p, x, out, lse), ConfigError);
}

}  // namespace
}  // namespace mt

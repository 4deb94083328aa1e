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

#include "attention_bounds.h"
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
  const Bounds bd = bounds_of(p, x);  // attention_bounds.h: derived, per element
  expect_within(out, out_ref, bd.out, "out");
  expect_within(lse, lse_ref, bd.lse, "lse");

  std::vector<float> gx = prefill;
  std::vector<double> gx_ref = to_double(prefill);
  fast_backward(p, x, dout, out, lse, gx);
  ref_backward(p, to_double(x), to_double(dout), out_ref, lse_ref, gx_ref);
  expect_within(gx, gx_ref, backward_bound(p, x, dout, out_ref, lse_ref, bd.out, bd.lse, prefill),
                "dq, dk, dv");
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
  std::vector<double> out_ref, lse_ref;
  ref_forward(p, to_double(x), out_ref, lse_ref);
  std::vector<double> gx_ref = to_double(prefill);
  ref_backward(p, to_double(x), rd, out_ref, lse_ref, gx_ref);
  const Bounds bd = bounds_of(p, x);
  expect_within(gx, gx_ref, backward_bound(p, x, r, out_ref, lse_ref, bd.out, bd.lse, prefill),
                "fast backward");

  // Double against double, so no host's rounding: central differences'
  // truncation h²/6·|f‴| (≈ 1e-10 for scores of O(1)) and f's rounding over h
  // (≈ 1e-16·Σ|r·out|/1e-5 ≤ 1e-10) are far below 1e-7 of the floor (1e-2 of
  // the largest gradient). The fast backward is then within its bound plus
  // |ref − fd| of the finite differences (the triangle inequality).
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
  const Bounds bd = bounds_of(p, x);
  expect_within(out, out_ref, bd.out, "out");
  expect_within(lse, lse_ref, bd.lse, "lse");
  const std::vector<float> dout = random_vec(p.n_out(), 22);
  const std::vector<float> prefill = random_vec(p.n_in, 23);
  std::vector<float> gx = prefill;
  std::vector<double> gx_ref = to_double(prefill);
  fast_backward(p, x, dout, out, lse, gx);
  ref_backward(p, to_double(x), to_double(dout), out_ref, lse_ref, gx_ref);
  expect_within(gx, gx_ref, backward_bound(p, x, dout, out_ref, lse_ref, bd.out, bd.lse, prefill),
                "dq, dk, dv");
}

TEST(Attention, QueryThatSeesNoKey) {
  // Keys at positions 3..12, queries at 0..9: queries 0, 1 and 2 see nothing.
  const Problem p = make_problem(2, 10, 10, 4, 2, 6, false, 0, 0, 3);
  const std::vector<float> x = random_vec(p.n_in, 31, 1.5f);
  std::vector<float> out, lse;
  fast_forward(p, x, out, lse);
  std::vector<double> out_ref, lse_ref;
  ref_forward(p, to_double(x), out_ref, lse_ref);
  const Bounds bd = bounds_of(p, x);
  expect_within(out, out_ref, bd.out, "out");
  expect_within(lse, lse_ref, bd.lse, "lse");
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
  // The merge's bound from the blocks' own (forward_bound on each block):
  // with w_k = exp(L_k − L), L off by Σ w_k·δL_k + Σ w_k·(3u + u·|L_k − mx|) +
  // 2u·|L − mx| + u·|L| (the two exps, their sum, the log, the add; float
  // std::exp and std::log within 1 ulp), each w_k by δL_k + δL + u·|L_k − L| +
  // 2u relatively, out = Σ o_k·w_k by Σ w_k·(δo_k + |o_k|·δw_k) + 2u·Σ|o_k w_k|.
  std::vector<double> bo[2], bl[2];
  for (int k = 0; k < 2; ++k)
    forward_bound(x.data() + p.q_off, blocks[k].k.data(), blocks[k].v.data(), p.q_pos.data(),
                  blocks[k].pos.data(), blocks[k].d, bo[k], bl[k]);
  std::vector<double> b_out(out_ref.size(), 1e-300), b_lse(lse_ref.size(), 1e-300);
  const double u = testing::kU32;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const size_t li = size_t((b * H + h) * T + i);
        const double L0 = blocks[0].lse[li], L1 = blocks[1].lse[li], L = lse_ref[li];
        if (L == -INFINITY) continue;
        const double Lk[2] = {L0, L1}, mx = std::max(L0, L1);
        double dL = 2 * u * std::abs(L - mx) + u * std::abs(L), wk[2] = {0, 0};
        for (int k = 0; k < 2; ++k) {
          if (Lk[k] == -INFINITY) continue;
          wk[k] = std::exp(Lk[k] - L);
          dL += wk[k] * (bl[k][li] + 3 * u + u * std::abs(Lk[k] - mx));
        }
        b_lse[li] = 1.01 * dL;
        for (int64_t c = 0; c < D; ++c) {
          const size_t oi = size_t((b * T + i) * p.d.out_stride + h * D + c);
          double e = 0;
          for (int k = 0; k < 2; ++k) {
            if (Lk[k] == -INFINITY) continue;
            const double o = blocks[k].out[oi], dw = bl[k][li] + dL + u * std::abs(Lk[k] - L) + 2 * u;
            e += wk[k] * (bo[k][oi] + std::abs(o) * dw) + 2 * u * std::abs(o * wk[k]);
          }
          b_out[oi] = 1.01 * e + 1e-300;
        }
      }

  for (int first : {0, 1}) {  // the second block is invisible to the first 68 queries: −inf on either side
    std::vector<float> out = blocks[first].out, lse = blocks[first].lse;
    attention_merge(out.data(), lse.data(), blocks[1 - first].out.data(), blocks[1 - first].lse.data(), p.d);
    expect_within(out, out_ref, b_out, "merged out, first block " + std::to_string(first));
    expect_within(lse, lse_ref, b_lse, "merged lse, first block " + std::to_string(first));
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
  const Bounds bd = bounds_of(p, x);  // the blocks' backward is fed the full forward's out and lse
  expect_within(gx, gx_ref, backward_bound(p, x, dout, out_ref, lse_ref, bd.out, bd.lse, prefill),
                "blockwise dq, dk, dv");
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
  const Bounds bd = bounds_of(p, x);
  expect_within(
      grads[0], gx_ref,
      backward_bound(p, x, dout, out_ref, lse_ref, bd.out, bd.lse, std::vector<float>(gx_ref.size(), 0.5f)),
      "dq, dk, dv");
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
  // The merge bound of KeyBlocksMerge… with exact parts: L = 1 + log 2 off by
  // 2·(3u)·½ + 2u·log 2 + u·(1 + log 2); each w = ½ by δL + u·log 2 + 2u; out
  // by Σ|o_k|·½·δw + 2u·Σ|o_k|·½.
  const double u = testing::kU32, dL = 3 * u + 2 * u * std::log(2.0) + u * (1 + std::log(2.0));
  const double dw = dL + u * std::log(2.0) + 2 * u;
  EXPECT_TRUE(testing::within_bound(lse2[0], 1.0 + std::log(2.0), dL, "hand merge lse"));
  EXPECT_TRUE(testing::within_bound(out2[0], 2.0, (1 + 3) * 0.5 * (dw + 2 * u), "hand merge out"));
  EXPECT_TRUE(testing::within_bound(out2[1], 4.0, (3 + 5) * 0.5 * (dw + 2 * u), "hand merge out"));
}

TEST(Attention, RejectsBadDims) {
  const Problem p = make_problem(1, 4, 4, 6, 4, 2, false);  // 6 heads over 4 kv heads
  const std::vector<float> x(static_cast<size_t>(p.n_in), 0.0f);
  std::vector<float> out, lse;
  EXPECT_THROW(fast_forward(p, x, out, lse), ConfigError);
}

}  // namespace
}  // namespace mt

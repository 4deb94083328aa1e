// Attention dropout (ops/attention.h AttentionDropout, ops/dropout.h): the
// blockwise kernels against the double reference with the same mask, the
// reference's backward against finite differences (the mask is a fixed
// function of the coordinates), the mask's statistics, and its independence of
// how heads and queries are split (what tensor and context parallelism do).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "attention_bounds.h"
#include "attention_problem.h"
#include "core/error.h"
#include "ops/dropout.h"

namespace mt {
namespace {

using namespace attention_test;

struct Dropped {
  Problem p;
  std::vector<int64_t> seq;
  AttentionDropout dr;
};

// A problem with dropout at rate `rate`; batch row b is global sequence 10 + 3b.
Dropped with_dropout(Problem p, double rate, int64_t head0 = 0) {
  Dropped x{std::move(p), {}, {}};
  for (int64_t b = 0; b < x.p.d.batch; ++b)
    x.seq.push_back(10 + 3 * b);
  x.dr.key = dropout_key(/*seed=*/7, /*step=*/4, /*layer=*/1, "attn", rate);
  x.dr.seq = x.seq.data();
  x.dr.head0 = head0;
  return x;
}

TEST(AttentionDropout, MatchesDoubleReferenceAcrossTilesAndGqa) {
  for (const Problem& base :
       {make_problem(2, 130, 130, 4, 2, 6, false), make_problem(1, 70, 70, 6, 2, 8, true, 1)}) {
    Dropped x = with_dropout(base, 0.3);
    x.p.d.dropout = &x.dr;
    const std::vector<float> in = random_vec(x.p.n_in, 21, 1.5f), dout = random_vec(x.p.n_out(), 22);
    std::vector<float> out, lse, gx(static_cast<size_t>(x.p.n_in), 0.0f);
    std::vector<double> out_ref, lse_ref, gx_ref(gx.size(), 0.0);
    fast_forward(x.p, in, out, lse);
    ref_forward(x.p, to_double(in), out_ref, lse_ref);
    const Bounds bd = bounds_of(x.p, in);  // attention_bounds.h: derived, the mask factors included
    expect_within(out, out_ref, bd.out, "out");
    expect_within(lse, lse_ref, bd.lse, "lse (the undropped normaliser)");
    fast_backward(x.p, in, dout, out, lse, gx);
    ref_backward(x.p, to_double(in), to_double(dout), out_ref, lse_ref, gx_ref);
    expect_within(
        gx, gx_ref,
        backward_bound(x.p, in, dout, out_ref, lse_ref, bd.out, bd.lse, std::vector<float>(gx.size(), 0.0f)),
        "dq, dk, dv");
    // Dropout changed the output: the same problem without it differs.
    Problem plain = base;
    std::vector<float> out0, lse0;
    fast_forward(plain, in, out0, lse0);
    double diff = 0;
    for (size_t i = 0; i < out.size(); ++i)
      diff = std::max(diff, static_cast<double>(std::abs(out[i] - out0[i])));
    EXPECT_GT(diff, 1e-2);  // not a rounding bound: the mask moves outputs by O(1)
  }
}

TEST(AttentionDropout, ReferenceBackwardMatchesFiniteDifferences) {
  Dropped x = with_dropout(make_problem(1, 9, 9, 2, 1, 4, false), 0.4);
  x.p.d.dropout = &x.dr;
  const std::vector<float> in = random_vec(x.p.n_in, 31, 1.5f);
  const std::vector<double> r = to_double(random_vec(x.p.n_out(), 32));
  auto loss = [&](const std::vector<double>& xd) {
    std::vector<double> o, l;
    ref_forward(x.p, xd, o, l);
    double s = 0;
    for (size_t i = 0; i < o.size(); ++i)
      s += r[i] * o[i];
    return s;
  };
  const std::vector<double> fd = numeric_grad(loss, to_double(in));
  std::vector<double> out, lse, g(fd.size(), 0.0);
  ref_forward(x.p, to_double(in), out, lse);
  ref_backward(x.p, to_double(in), r, out, lse, g);
  // Double against double (no host's rounding): the truncation h²/6·|f‴| and
  // f's rounding over h are ≈ 1e-10, far below 1e-7 of rel_error's floor.
  expect_close(g, fd, 1e-7, "reference backward with dropout vs finite differences");
}

TEST(AttentionDropout, MaskRateScaleAndOff) {
  const DropoutKey k = dropout_key(1, 0, 0, "attn", 0.25);
  int64_t dropped = 0, n = 0;
  for (uint32_t i = 0; i < 200; ++i) {
    for (uint32_t j = 0; j < 200; ++j, ++n) {
      const float z = dropout_factor(k, i, j, 3, 5);
      ASSERT_TRUE(z == 0.0f || z == 1.0f / 0.75f) << z;
      dropped += z == 0.0f;
    }
  }
  // 40000 Bernoulli(0.25) draws: standard deviation 87, so ±500 (5.8σ) is far
  // outside chance; a count, not a rounding bound, and the mask is the same bits
  // on every host.
  EXPECT_NEAR(static_cast<double>(dropped), 0.25 * static_cast<double>(n), 500.0);
  EXPECT_FALSE(dropout_key(1, 0, 0, "attn", 0.0).on);
  EXPECT_THROW(dropout_key(1, 0, 0, "attn", 1.0), ConfigError);
  // Other steps, layers and sites draw other masks.
  const DropoutKey other[] = {dropout_key(1, 1, 0, "attn", 0.25), dropout_key(1, 0, 1, "attn", 0.25),
                              dropout_key(1, 0, 0, "o_proj", 0.25), dropout_key(2, 0, 0, "attn", 0.25)};
  for (const DropoutKey& o : other) {
    int64_t same = 0;
    for (uint32_t i = 0; i < 1000; ++i)
      same += dropout_factor(o, i, 0, 0, 0) == dropout_factor(k, i, 0, 0, 0);
    EXPECT_LT(same, 800);  // independent masks agree on about 62.5% of elements
  }
}

TEST(AttentionDropout, HeadsAndQueryChunksComputedApartEqualTheWhole) {
  // All 4 heads at once, against heads 2-3 alone (head0 = 2, as tp rank 1 of
  // 2 holds them) and against the last 5 queries alone at their positions (as
  // a context-parallel chunk): the same mask, so the same outputs.
  const int64_t B = 2, T = 12, H = 4, D = 4;
  Dropped whole = with_dropout(make_problem(B, T, T, H, H, D, false), 0.5);
  whole.p.d.dropout = &whole.dr;
  const std::vector<float> in = random_vec(whole.p.n_in, 41);
  std::vector<float> out, lse;
  fast_forward(whole.p, in, out, lse);

  Dropped half = with_dropout(make_problem(B, T, T, 2, 2, D, false), 0.5, /*head0=*/2);
  half.p.d.dropout = &half.dr;
  std::vector<float> in_half(static_cast<size_t>(half.p.n_in));
  for (int64_t t = 0; t < B * T; ++t) {  // heads 2, 3 of q, k and v
    for (int64_t c = 0; c < 2 * D; ++c) {
      in_half[t * 2 * D + c] = in[t * H * D + 2 * D + c];
      in_half[half.p.k_off + t * 2 * D + c] = in[whole.p.k_off + t * H * D + 2 * D + c];
      in_half[half.p.v_off + t * 2 * D + c] = in[whole.p.v_off + t * H * D + 2 * D + c];
    }
  }
  std::vector<float> out_half, lse_half;
  fast_forward(half.p, in_half, out_half, lse_half);
  for (int64_t t = 0; t < B * T; ++t)
    for (int64_t c = 0; c < 2 * D; ++c)
      ASSERT_EQ(out_half[t * 2 * D + c], out[t * H * D + 2 * D + c]) << "token " << t << " column " << c;

  const int64_t Tq = 5;
  Dropped late = with_dropout(make_problem(B, Tq, T, H, H, D, false, 0, T - Tq, 0), 0.5);
  late.p.d.dropout = &late.dr;
  std::vector<float> in_late(static_cast<size_t>(late.p.n_in));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t c = 0; c < H * D; ++c)
        in_late[(b * Tq + i) * H * D + c] = in[(b * T + T - Tq + i) * H * D + c];
  std::copy(in.begin() + whole.p.k_off, in.end(), in_late.begin() + late.p.k_off);
  std::vector<float> out_late, lse_late;
  fast_forward(late.p, in_late, out_late, lse_late);
  // Another query tiling may round otherwise; both runs are within their
  // derived bounds of the exact values, so within the sum of each other.
  const Bounds b_whole = bounds_of(whole.p, in), b_late = bounds_of(late.p, in_late);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Tq; ++i)
      for (int64_t c = 0; c < H * D; ++c) {
        const size_t l = size_t((b * Tq + i) * H * D + c), w = size_t((b * T + T - Tq + i) * H * D + c);
        ASSERT_TRUE(
            testing::within_bound(out_late[l], out[w], b_late.out[l] + b_whole.out[w], "query chunk"));
      }
}

}  // namespace
}  // namespace mt

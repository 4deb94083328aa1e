// The oneDNN bf16 kernel against the rule it implements (docs/MODEL.md
// "Precision"): both kernels are held, element by element, to a double
// product of operands rounded to bf16 by a rule written here from the
// definition (normal: 8 significant bits through frexp and nearbyint;
// subnormal: a multiple of 2^-133), not taken from core/bf16.h. The emulated
// kernel is within the fp32 accumulation bound; oneDNN also within the terms
// of the bf16 units' denormal flushing. Every test skips, counted, where the
// oneDNN kernel cannot run (a build without oneDNN, a CPU without bf16
// instructions); the selection tests run everywhere.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "bounds.h"
#include "core/error.h"
#include "gemm_operands.h"
#include "ops/gemm.h"
#include "ops/gemm_amx.h"
#include "ops/gemm_onednn.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::random_floats;

constexpr double kMinNormal = 0x1p-126;  // fp32's (and bf16's) smallest normal

double bf16_value(float x) {
  const double v = x;
  if (std::abs(v) < kMinNormal) return std::nearbyint(v * 0x1p133) * 0x1p-133;  // bf16 subnormal spacing
  int e = 0;
  const double m = std::frexp(v, &e);
  return std::ldexp(std::nearbyint(m * 256.0) / 256.0, e);
}

struct Problem {
  int64_t M, N, K;
  Trans ta, tb;
  Out out;
  int64_t pad;  // extra floats per stored row: ld > the row's width
};

using Operands = testing::GemmOperands;

// Uniform in [-2, 2); with `tiny`, a third of A's elements are scaled into the
// subnormal range and a third of B's by 2^-100, so that products with a
// subnormal operand, underflowing products and subnormal partial sums occur.
Operands make_operands(const Problem& p, uint32_t seed, bool tiny) {
  Operands o = testing::random_gemm_operands(p.M, p.N, p.K, p.ta, p.tb, p.pad, seed);
  if (tiny) {
    for (size_t i = 0; i < o.A.size(); i += 3)
      o.A[i] = std::ldexp(o.A[i], -128);
    for (size_t i = 1; i < o.B.size(); i += 3)
      o.B[i] = std::ldexp(o.B[i], -100);
    for (size_t i = 0; i < o.C0.size(); i += 2)
      o.C0[i] = 0.0f;
  }
  return o;
}

// The rows of C checked: all of a small product, 7 spread rows of a large one
// (the double reference of a 2048 × 8192 × 512 product would take minutes).
std::vector<int64_t> checked_rows(int64_t M) {
  if (M <= 64) {
    std::vector<int64_t> all(static_cast<size_t>(M));
    for (int64_t i = 0; i < M; ++i)
      all[static_cast<size_t>(i)] = i;
    return all;
  }
  return {0, 1, M / 7, M / 3, M / 2, M - 2, M - 1};
}

// Per checked element: the double product of the rounded operands (+ C0), and
// the bounds. accumulation = γ_{K+1} · (Σ|a·b| + |C0|): any fp32 summation of
// K exact products and C0, in any order (tests/bounds.h). flush = the terms a
// unit that flushes denormals (DAZ, FTZ) drops or rounds away beyond that:
// Σ|a·b| over the k whose a or b is subnormal (taken as 0), plus 2^-126 for
// each of the K products that underflows and each of the K + 1 partial sums
// that falls below 2^-126 (flushed to 0): (2K + 1) · 2^-126.
struct Expected {
  std::vector<double> value, accumulation, flush;
};

Expected expected(const Problem& p, const Operands& o, const std::vector<int64_t>& rows) {
  Expected e;
  for (int64_t i : rows) {
    for (int64_t j = 0; j < p.N; ++j) {
      const double c0 = p.out == Out::add ? o.C0[static_cast<size_t>(i * o.ldc + j)] : 0.0;
      double s = c0, mag = std::abs(c0), sub = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        const float a = p.ta == Trans::yes ? o.A[static_cast<size_t>(k * o.lda + i)]
                                           : o.A[static_cast<size_t>(i * o.lda + k)];
        const float b = p.tb == Trans::yes ? o.B[static_cast<size_t>(j * o.ldb + k)]
                                           : o.B[static_cast<size_t>(k * o.ldb + j)];
        const double ab = bf16_value(a) * bf16_value(b);
        s += ab;
        mag += std::abs(ab);
        if (std::abs(bf16_value(a)) < kMinNormal || std::abs(bf16_value(b)) < kMinNormal) sub += std::abs(ab);
      }
      e.value.push_back(s);
      e.accumulation.push_back(testing::gamma_n(static_cast<double>(p.K + 1)) * mag);
      e.flush.push_back(sub + static_cast<double>(2 * p.K + 1) * kMinNormal);
    }
  }
  return e;
}

std::vector<float> run(const Problem& p, const Operands& o, Bf16Kernel kernel) {
  set_bf16_kernel(kernel);
  std::vector<float> C = o.C0;
  sgemm(p.ta, p.tb, p.M, p.N, p.K, o.A.data(), o.lda, o.B.data(), o.ldb, C.data(), o.ldc, p.out);
  return C;
}

// The onednn kernel's two paths called directly, whichever of them sgemm picks
// for this shape: oneDNN's matmul, and (where the CPU has AMX) the tiles.
using Bf16Path = void (*)(Trans, Trans, int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                          int64_t, float*, int64_t, Out);
std::vector<float> run_path(const Problem& p, const Operands& o, Bf16Path path) {
  std::vector<float> C = o.C0;
  path(p.ta, p.tb, p.M, p.N, p.K, o.A.data(), o.lda, o.B.data(), o.ldb, C.data(), o.ldc, p.out);
  return C;
}

bool tiles_run(const Problem& p) {
  return amx::unavailable_reason().empty() && amx::fits(p.M, p.N, p.K);
}

// The checked rows of C within their bounds (with_flush adds the flush
// terms); the padding of every row untouched.
void expect_within(const Problem& p, const Operands& o, const std::vector<float>& C, const Expected& e,
                   const std::vector<int64_t>& rows, bool with_flush, const char* what) {
  std::vector<double> got, bound;
  for (int64_t i : rows) {
    for (int64_t j = 0; j < p.N; ++j)
      got.push_back(C[static_cast<size_t>(i * o.ldc + j)]);
  }
  for (size_t n = 0; n < e.value.size(); ++n)
    bound.push_back(e.accumulation[n] + (with_flush ? e.flush[n] : 0.0));
  const double ratio =
      testing::bound_ratio(got.data(), e.value.data(), bound.data(), static_cast<int64_t>(got.size()));
  testing::log_ratio(ratio, what);
  EXPECT_LE(ratio, 1.0) << what;
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = p.N; j < o.ldc; ++j)
      ASSERT_EQ(C[static_cast<size_t>(i * o.ldc + j)], o.C0[static_cast<size_t>(i * o.ldc + j)]) << "padding";
  }
}

class GemmOnednn : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!onednn_bf16_unavailable().empty())
      GTEST_SKIP() << "the oneDNN bf16 kernel cannot run here: " << onednn_bf16_unavailable();
  }
  void TearDown() override {
    if (onednn_bf16_unavailable().empty()) set_bf16_kernel(previous_);
  }
  const MatmulPrecisionGuard bf16_{MatmulPrecision::bf16};
  const Bf16Kernel previous_ = bf16_kernel();
};

// Both kernels on one problem, each against the reference; oneDNN twice, bitwise.
void check_problem(const Problem& p, uint32_t seed, bool tiny) {
  SCOPED_TRACE(::testing::Message() << p.M << "x" << p.N << "x" << p.K << " ta " << (p.ta == Trans::yes)
                                    << " tb " << (p.tb == Trans::yes) << " add " << (p.out == Out::add)
                                    << " pad " << p.pad << " tiny " << tiny);
  const Operands o = make_operands(p, seed, tiny);
  const std::vector<int64_t> rows = checked_rows(p.M);
  const Expected e = expected(p, o, rows);
  const std::vector<float> onednn = run(p, o, Bf16Kernel::onednn);
  expect_within(p, o, onednn, e, rows, true, "onednn");
  if (!tiny) expect_within(p, o, run(p, o, Bf16Kernel::emulated), e, rows, false, "emulated");
  const std::vector<float> again = run(p, o, Bf16Kernel::onednn);
  EXPECT_EQ(std::memcmp(onednn.data(), again.data(), onednn.size() * sizeof(float)), 0) << "not repeatable";
  if (!tiles_run(p)) return;
  expect_within(p, o, run_path(p, o, onednn::matmul_bf16), e, rows, true, "onednn matmul");
  const std::vector<float> tiles = run_path(p, o, amx::sgemm_bf16);
  expect_within(p, o, tiles, e, rows, true, "amx tiles");
  if (onednn::tiles_take(p.M, p.N, p.K)) {  // not where ONEDNN_MAX_CPU_ISA caps oneDNN below AMX
    EXPECT_EQ(std::memcmp(onednn.data(), tiles.data(), tiles.size() * sizeof(float)), 0)
        << "sgemm took the tiles";
  }
}

// Awkward shapes: 1 × 1 × 1, primes, K = 1 and K not a multiple of 32 (the
// units take bf16 pairs; oneDNN blocks K by 32 or more), every transpose,
// both output modes, ld > width.
TEST_F(GemmOnednn, AwkwardShapesWithinTheBound) {
  const int64_t sizes[][3] = {{1, 1, 1},    {7, 13, 33},  {1, 65, 17},  {37, 5, 129},   {19, 23, 1},
                              {61, 67, 71}, {64, 3, 300}, {33, 31, 65}, {128, 128, 256}};
  uint32_t seed = 101;
  for (const auto& s : sizes) {
    for (Trans ta : {Trans::no, Trans::yes}) {
      for (Trans tb : {Trans::no, Trans::yes}) {
        for (Out out : {Out::assign, Out::add})
          check_problem({s[0], s[1], s[2], ta, tb, out, (s[0] + s[2]) % 4 + (out == Out::add)}, seed += 3,
                        false);
      }
    }
  }
}

// Subnormal operands, underflowing products and partial sums: the oneDNN
// kernel within the accumulation bound plus the flush terms.
TEST_F(GemmOnednn, DenormalsWithinTheFlushBound) {
  uint32_t seed = 501;
  for (Trans ta : {Trans::no, Trans::yes}) {
    for (Out out : {Out::assign, Out::add})
      check_problem({29, 31, 97, ta, Trans::yes, out, 2}, seed += 3, true);
  }
}

// What the flush terms are for: the bf16 units (AVX512-BF16's vdpbf16ps,
// AMX's tdpbf16ps) take a subnormal operand as 0 and flush a product below
// 2^-126 to 0, where the emulated kernel (OpenBLAS, no DAZ/FTZ) keeps both.
TEST_F(GemmOnednn, DenormalsAreFlushedByTheBf16Units) {
  const float a[2] = {0x1p-130f, 0x1p-70f}, b[2] = {1.0f, 0x1p-70f};
  for (Bf16Kernel k : {Bf16Kernel::emulated, Bf16Kernel::onednn}) {
    set_bf16_kernel(k);
    float subnormal_operand = -1, underflow = -1;
    sgemm(Trans::no, Trans::no, 1, 1, 1, &a[0], 1, &b[0], 1, &subnormal_operand, 1, Out::assign);
    sgemm(Trans::no, Trans::no, 1, 1, 1, &a[1], 1, &b[1], 1, &underflow, 1, Out::assign);
    EXPECT_EQ(subnormal_operand, k == Bf16Kernel::onednn ? 0.0f : 0x1p-130f);
    EXPECT_EQ(underflow, k == Bf16Kernel::onednn ? 0.0f : 0x1p-140f);
  }
}

// Every product of a training step of the parity tests' tiny Llama
// (tests/dist/common.sh: d 32, 4 heads of 8, 2 kv heads, ffn 48, vocab 300,
// 8 × 16 tokens) and of configs/bench.toml's model (d 512, 8 heads of 64, ffn
// 1376, vocab 8192, 8 × 256 tokens): each linear layer's forward, input
// gradient and weight gradient as gemm.cpp's linear_forward/backward call
// them, and attention's tile products.
TEST_F(GemmOnednn, ModelShapesWithinTheBound) {
  struct Model {
    int64_t T, C, QKV, F, V, D;
  };
  uint32_t seed = 901;
  for (const Model& m : {Model{128, 32, 64, 48, 300, 8}, Model{2048, 512, 1536, 1376, 8192, 64}}) {
    const int64_t linears[][2] = {{m.C, m.QKV}, {m.C, m.C}, {m.C, 2 * m.F}, {m.F, m.C}, {m.C, m.V}};
    for (const auto& l : linears) {
      const int64_t IC = l[0], OC = l[1];
      check_problem({m.T, OC, IC, Trans::no, Trans::yes, Out::assign, 0}, seed += 3, false);  // forward
      check_problem({m.T, IC, OC, Trans::no, Trans::no, Out::assign, 0}, seed += 3, false);   // dX
      check_problem({OC, IC, m.T, Trans::yes, Trans::no, Out::add, 0}, seed += 3, false);     // dW
    }
    const int64_t tile = std::min<int64_t>(64, m.T / 8);
    check_problem({tile, tile, m.D, Trans::no, Trans::yes, Out::assign, 64 - tile}, seed += 3,
                  false);                                                                    // Q·Kᵀ
    check_problem({tile, m.D, tile, Trans::no, Trans::no, Out::add, 0}, seed += 3, false);   // P·V
    check_problem({tile, m.D, tile, Trans::yes, Trans::no, Out::add, 0}, seed += 3, false);  // dV
  }
}

// Attention's OpenMP workers call sgemm at once: each thread's products
// within the bound, and the whole concurrent pass bitwise repeatable.
TEST_F(GemmOnednn, ConcurrentCallsRepeatable) {
  set_bf16_kernel(Bf16Kernel::onednn);
  const Problem p{64, 64, 64, Trans::no, Trans::yes, Out::add, 0};
  const int n = 16;
  std::vector<Operands> ops;
  for (int t = 0; t < n; ++t)
    ops.push_back(make_operands(p, 2000 + 7 * static_cast<uint32_t>(t), false));
  auto pass = [&] {
    std::vector<std::vector<float>> Cs(n);
#pragma omp parallel for num_threads(2) schedule(dynamic)
    for (int t = 0; t < n; ++t) {
      Cs[static_cast<size_t>(t)] = ops[static_cast<size_t>(t)].C0;
      const Operands& o = ops[static_cast<size_t>(t)];
      sgemm(p.ta, p.tb, p.M, p.N, p.K, o.A.data(), o.lda, o.B.data(), o.ldb,
            Cs[static_cast<size_t>(t)].data(), o.ldc, p.out);
    }
    return Cs;
  };
  const auto first = pass(), second = pass();
  const std::vector<int64_t> rows = checked_rows(p.M);
  for (int t = 0; t < n; ++t) {
    expect_within(p, ops[static_cast<size_t>(t)], first[static_cast<size_t>(t)],
                  expected(p, ops[static_cast<size_t>(t)], rows), rows, true, "onednn concurrent");
    EXPECT_EQ(first[static_cast<size_t>(t)], second[static_cast<size_t>(t)]) << "call " << t;
  }
}

// linear_backward with both gradients rounds dout once for the two products
// (gemm_onednn.h's linear_backward_bf16): the same bits as the two sgemm calls
// it stands for, at shapes past the AMX tiles' limit (where it applies).
TEST_F(GemmOnednn, LinearBackwardBothGradientsSameBitsAsTwoProducts) {
  set_bf16_kernel(Bf16Kernel::onednn);
  const int64_t N = 320, IC = 160, OC = 288;
  const std::vector<float> dout = random_floats(N * OC, 11), inp = random_floats(N * IC, 12),
                           weight = random_floats(OC * IC, 13), dw0 = random_floats(OC * IC, 14);
  std::vector<float> dinp(static_cast<size_t>(N * IC), -1.0f), dw = dw0;
  linear_backward(dinp.data(), dw.data(), dout.data(), inp.data(), weight.data(), N, IC, OC);
  std::vector<float> dinp2(dinp.size(), -2.0f), dw2 = dw0;
  sgemm(Trans::no, Trans::no, N, IC, OC, dout.data(), OC, weight.data(), IC, dinp2.data(), IC, Out::assign);
  sgemm(Trans::yes, Trans::no, OC, IC, N, dout.data(), OC, inp.data(), IC, dw2.data(), IC, Out::add);
  EXPECT_EQ(std::memcmp(dinp.data(), dinp2.data(), dinp.size() * sizeof(float)), 0) << "dinp";
  EXPECT_EQ(std::memcmp(dw.data(), dw2.data(), dw.size() * sizeof(float)), 0) << "dweight";
}

// Bf16WeightBits: inside its ranges a weight's bits are rounded once and kept
// for the scope (the same bits as rounding per call; kept even if the caller
// broke its promise and wrote the weight, which is how the test sees them
// kept), rounded afresh under the next scope, and never kept for a weight
// outside the ranges.
TEST_F(GemmOnednn, WeightBitsKeptForTheScopeOnly) {
  set_bf16_kernel(Bf16Kernel::onednn);
  const int64_t N = 192, IC = 144, OC = 160;
  const std::vector<float> x = random_floats(N * IC, 21), dy = random_floats(N * OC, 22);
  std::vector<float> w = random_floats(OC * IC, 23);
  const std::vector<float> w_old = w, w_new = random_floats(OC * IC, 24);
  auto forward = [&](const std::vector<float>& weight) {
    std::vector<float> y(static_cast<size_t>(N * OC));
    linear_forward(y.data(), x.data(), weight.data(), N, IC, OC);
    return y;
  };
  auto dinp = [&](const std::vector<float>& weight) {
    std::vector<float> dx(static_cast<size_t>(N * IC));
    linear_backward(dx.data(), nullptr, dy.data(), nullptr, weight.data(), N, IC, OC);
    return dx;
  };
  const std::vector<float> y_old = forward(w_old), y_new = forward(w_new), dx_old = dinp(w_old);
  ASSERT_NE(y_old, y_new);
  {
    const Bf16WeightBits kept({{w.data(), w.size()}});
    EXPECT_EQ(forward(w), y_old) << "kept bits are the per-call bits";
    w = w_new;  // written inside the scope: the kept bits stay the old weight's
    EXPECT_EQ(forward(w), y_old) << "not kept";
    EXPECT_EQ(dinp(w), dx_old) << "dinp did not read the kept bits";
    std::vector<float> outside = w_old;  // a weight outside the ranges: rounded per call
    EXPECT_EQ(forward(outside), y_old);
    outside = w_new;
    EXPECT_EQ(forward(outside), y_new) << "kept bits of a weight outside the ranges";
  }
  EXPECT_EQ(forward(w), y_new) << "no scope: rounded per call";
  const Bf16WeightBits next({{w.data(), w.size()}});
  EXPECT_EQ(forward(w), y_new) << "the next scope reused the last scope's bits";
}

// MESHTRAIN_BF16_MATMUL: its values, the default, and the refusals by name.
TEST(Bf16Kernel, EnvironmentValues) {
  const bool available = onednn_bf16_unavailable().empty();
  EXPECT_EQ(resolve_bf16_kernel(nullptr), available ? Bf16Kernel::onednn : Bf16Kernel::emulated);
  EXPECT_EQ(resolve_bf16_kernel(""), resolve_bf16_kernel(nullptr));
  EXPECT_EQ(resolve_bf16_kernel("emulated"), Bf16Kernel::emulated);
  try {
    resolve_bf16_kernel("amx");
    ADD_FAILURE() << "amx accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("MESHTRAIN_BF16_MATMUL (amx) must be emulated or onednn"),
              std::string::npos)
        << e.what();
  }
  if (available) {
    EXPECT_EQ(resolve_bf16_kernel("onednn"), Bf16Kernel::onednn);
  } else {
    EXPECT_THROW(resolve_bf16_kernel("onednn"), ConfigError);
    EXPECT_THROW(set_bf16_kernel(Bf16Kernel::onednn), ConfigError);
    EXPECT_NE(bf16_kernel_description().find(onednn_bf16_unavailable()), std::string::npos);
  }
}

}  // namespace
}  // namespace mt

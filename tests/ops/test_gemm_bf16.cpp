// sgemm under MatmulPrecision::bf16 (docs/MODEL.md "Precision") against a
// double-precision product of explicitly bf16-rounded operands. The rounding
// of the reference is written here from the definition (8 significant bits,
// nearest, ties to even, through frexp and nearbyint), not taken from
// core/bf16.h, so the two are independent.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <string>
#include <vector>

#include "bounds.h"
#include "core/error.h"
#include "gemm_operands.h"
#include "ops/gemm.h"
#include "test_helpers.h"

namespace mt {
namespace {

using testing::random_floats;

// x rounded to 8 significant bits, nearest, ties to even (normal range only,
// which is all these inputs hold): frexp gives x = m · 2^e with |m| in
// [0.5, 1), so m · 256 carries the 8 kept bits left of the point.
double bf16_reference(float x) {
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);
  return std::ldexp(std::nearbyint(m * 256.0) / 256.0, e);  // nearbyint: ties to even by default
}

struct Problem {
  int64_t M, N, K;
  Trans ta, tb;
  int64_t pad;  // extra floats per stored row, so that ld > the row's width
};

using Operands = testing::GemmOperands;

Operands make_operands(const Problem& p, uint32_t seed) {
  return testing::random_gemm_operands(p.M, p.N, p.K, p.ta, p.tb, p.pad, seed);
}

// C[i, j] (+ C0 for Out::add) in double, each operand element passed through
// `round` first (identity or bf16_reference).
template <typename Round>
std::vector<double> reference(const Problem& p, const Operands& o, Out out, Round round) {
  std::vector<double> C(static_cast<size_t>(p.M * p.N));
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.N; ++j) {
      double s = out == Out::add ? o.C0[static_cast<size_t>(i * o.ldc + j)] : 0.0;
      for (int64_t k = 0; k < p.K; ++k) {
        const float a = p.ta == Trans::yes ? o.A[static_cast<size_t>(k * o.lda + i)]
                                           : o.A[static_cast<size_t>(i * o.lda + k)];
        const float b = p.tb == Trans::yes ? o.B[static_cast<size_t>(j * o.ldb + k)]
                                           : o.B[static_cast<size_t>(k * o.ldb + j)];
        s += round(a) * round(b);
      }
      C[static_cast<size_t>(i * p.N + j)] = s;
    }
  }
  return C;
}

// ‖C − ref‖ / ‖ref‖ over the M × N block; the padding of C must be untouched.
double rel_l2(const Problem& p, const Operands& o, const std::vector<float>& C,
              const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < p.M; ++i) {
    for (int64_t j = 0; j < p.N; ++j) {
      const double d = C[static_cast<size_t>(i * o.ldc + j)] - ref[static_cast<size_t>(i * p.N + j)];
      num += d * d;
      den += ref[static_cast<size_t>(i * p.N + j)] * ref[static_cast<size_t>(i * p.N + j)];
    }
    for (int64_t j = p.N; j < o.ldc; ++j)
      EXPECT_EQ(C[static_cast<size_t>(i * o.ldc + j)], o.C0[static_cast<size_t>(i * o.ldc + j)]) << "padding";
  }
  return std::sqrt(num / den);
}

// The derived bound of rel_l2 against the double product of the same operands
// (rounded by `round`): each element is an fp32 sum of K products (exact in
// fp32 for bf16 operands, rounded once otherwise) and C0 for Out::add, so in
// any order within γ_{K+1} · (Σ|a·b| + |C0|) (tests/bounds.h), and
// ‖C − ref‖₂ ≤ γ_{K+1} · ‖Σ|a·b| + |C0|‖₂. The rounding is odd (bf16's is
// sign-symmetric), so the magnitudes are the reference on |operands|.
template <typename Round>
double dot_tol(const Problem& p, const Operands& o, Out out, Round round) {
  Operands m = o;
  for (auto* v : {&m.A, &m.B, &m.C0})
    for (float& x : *v)
      x = std::abs(x);
  const std::vector<double> mag = reference(p, m, out, round), ref = reference(p, o, out, round);
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    num += mag[i] * mag[i];
    den += ref[i] * ref[i];
  }
  return testing::gamma_n(static_cast<double>(p.K + 1)) * std::sqrt(num / den);
}

std::vector<float> run(const Problem& p, const Operands& o, Out out) {
  std::vector<float> C = o.C0;
  sgemm(p.ta, p.tb, p.M, p.N, p.K, o.A.data(), o.lda, o.B.data(), o.ldb, C.data(), o.ldc, out);
  return C;
}

// Awkward sizes (none a multiple of a BLAS block), each with every transpose.
std::vector<Problem> problems() {
  std::vector<Problem> out;
  const int64_t sizes[][3] = {{7, 13, 33}, {1, 65, 17}, {37, 5, 129}, {19, 23, 1}, {64, 3, 300}};
  for (const auto& s : sizes) {
    for (Trans ta : {Trans::no, Trans::yes}) {
      for (Trans tb : {Trans::no, Trans::yes})
        out.push_back({s[0], s[1], s[2], ta, tb, (s[0] + s[2]) % 4});
    }
  }
  return out;
}

// Each bf16 × bf16 product is exact in fp32 (8 + 8 significant bits), so
// against the double product of the rounded operands only the fp32
// accumulation differs: within dot_tol, derived. Against the product of the
// unrounded operands the rounding shows: each operand's relative error has
// rms ≈ 0.42 · 2⁻⁸ on uniform data, so ≈ 2e-3 here. That window (5e-4, 6e-3)
// is not an accumulation bound: the bf16 rounding of fixed operands is the same
// bits on every host, and the fp32 sums move it by under dot_tol (< 1e-5).
TEST(GemmBf16, MatchesDoubleProductOfRoundedOperands) {
  const MatmulPrecisionGuard bf16(MatmulPrecision::bf16);
  uint32_t seed = 11;
  for (const Problem& p : problems()) {
    const Operands o = make_operands(p, seed += 3);
    for (Out out : {Out::assign, Out::add}) {
      SCOPED_TRACE(::testing::Message() << p.M << "x" << p.N << "x" << p.K << " ta " << (p.ta == Trans::yes)
                                        << " tb " << (p.tb == Trans::yes) << " add " << (out == Out::add));
      const std::vector<float> C = run(p, o, out);
      EXPECT_LT(rel_l2(p, o, C, reference(p, o, out, bf16_reference)), dot_tol(p, o, out, bf16_reference));
      if (out == Out::assign && p.K >= 17) {
        const double vs_exact = rel_l2(p, o, C, reference(p, o, out, [](float x) { return double{x}; }));
        EXPECT_GT(vs_exact, 5e-4);
        EXPECT_LT(vs_exact, 6e-3);
      }
    }
  }
}

TEST(GemmBf16, Fp32ModeIsTheUnroundedProduct) {
  ASSERT_EQ(matmul_precision(), MatmulPrecision::fp32);  // the default
  for (const Problem& p : problems()) {
    const Operands o = make_operands(p, 5);
    const std::vector<float> C = run(p, o, Out::assign);
    const auto exact = [](float x) { return double{x}; };
    EXPECT_LT(rel_l2(p, o, C, reference(p, o, Out::assign, exact)), dot_tol(p, o, Out::assign, exact));
    if (p.K >= 17) {
      EXPECT_GT(rel_l2(p, o, C, reference(p, o, Out::assign, bf16_reference)), 5e-4);
    }
  }
}

TEST(GemmBf16, OperandsAreNotWrittenAndEmptySumIsZero) {
  const MatmulPrecisionGuard bf16(MatmulPrecision::bf16);
  const Problem p{9, 11, 21, Trans::yes, Trans::no, 2};
  const Operands o = make_operands(p, 77);
  Operands copy = o;
  run(p, copy, Out::add);
  EXPECT_EQ(copy.A, o.A);
  EXPECT_EQ(copy.B, o.B);
  std::vector<float> C(6, 5.0f);
  sgemm(Trans::no, Trans::no, 2, 3, 0, nullptr, 1, nullptr, 3, C.data(), 3, Out::assign);
  EXPECT_EQ(C, std::vector<float>(6, 0.0f));
}

// The MoE experts and attention tiles call sgemm from several OpenMP threads
// at once; each thread's result must be its own problem's.
TEST(GemmBf16, ConcurrentCallsFromOpenMPThreads) {
  const MatmulPrecisionGuard bf16(MatmulPrecision::bf16);
  const std::vector<Problem> ps = problems();
  std::vector<Operands> ops;
  std::vector<std::vector<double>> refs;
  for (size_t i = 0; i < ps.size(); ++i) {
    ops.push_back(make_operands(ps[i], static_cast<uint32_t>(100 + 3 * i)));
    refs.push_back(reference(ps[i], ops.back(), Out::assign, bf16_reference));
  }
  std::vector<double> tol(ps.size());
  for (size_t i = 0; i < ps.size(); ++i)
    tol[i] = dot_tol(ps[i], ops[i], Out::assign, bf16_reference);
  std::vector<double> err(ps.size() * 4);
  const testing::ThreadScope threads(4);
#pragma omp parallel for schedule(dynamic, 1)
  for (int64_t t = 0; t < static_cast<int64_t>(err.size()); ++t) {
    const size_t i = static_cast<size_t>(t) % ps.size();
    std::vector<float> C = ops[i].C0;
    sgemm(ps[i].ta, ps[i].tb, ps[i].M, ps[i].N, ps[i].K, ops[i].A.data(), ops[i].lda, ops[i].B.data(),
          ops[i].ldb, C.data(), ops[i].ldc, Out::assign);
    double num = 0, den = 0;
    for (int64_t r = 0; r < ps[i].M; ++r) {
      for (int64_t c = 0; c < ps[i].N; ++c) {
        const double ref = refs[i][static_cast<size_t>(r * ps[i].N + c)];
        const double d = C[static_cast<size_t>(r * ops[i].ldc + c)] - ref;
        num += d * d;
        den += ref * ref;
      }
    }
    err[static_cast<size_t>(t)] = std::sqrt(num / den);
  }
  for (size_t t = 0; t < err.size(); ++t)
    EXPECT_LT(err[t], tol[t % ps.size()]) << "call " << t;
}

TEST(MatmulPrecision, GuardRestoresAndNests) {
  ASSERT_EQ(matmul_precision(), MatmulPrecision::fp32);
  {
    const MatmulPrecisionGuard outer(MatmulPrecision::bf16);
    EXPECT_EQ(matmul_precision(), MatmulPrecision::bf16);
    {
      const MatmulPrecisionGuard inner(MatmulPrecision::fp32);
      EXPECT_EQ(matmul_precision(), MatmulPrecision::fp32);
    }
    EXPECT_EQ(matmul_precision(), MatmulPrecision::bf16);
  }
  EXPECT_EQ(matmul_precision(), MatmulPrecision::fp32);
}

TEST(MatmulPrecision, ParsedByName) {
  EXPECT_EQ(parse_matmul_precision("fp32"), MatmulPrecision::fp32);
  EXPECT_EQ(parse_matmul_precision("bf16"), MatmulPrecision::bf16);
  EXPECT_STREQ(matmul_precision_name(MatmulPrecision::bf16), "bf16");
  for (const std::string bad : {"fp16", "BF16", "", "bfloat16"}) {
    try {
      parse_matmul_precision(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("train.precision (" + bad + ") must be fp32 or bf16"),
                std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace mt

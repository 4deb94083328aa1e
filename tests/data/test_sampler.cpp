#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "data/sampler.h"
#include "data/test_util.h"

namespace mt {
namespace {

// Token i of the file is i % vocab, so a row's content reveals its offset.
TokenFile ramp_file(int64_t n, int64_t vocab = 1 << 20) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    t[static_cast<size_t>(i)] = static_cast<int32_t>(i % vocab);
  const auto path = (testing_data::fresh_dir() / "ramp.bin").string();
  write_token_file(path, t, vocab);
  return TokenFile::open(path);
}

struct Batch {
  std::vector<int32_t> inputs, targets;
  bool operator==(const Batch&) const = default;
};

Batch sample(const TokenFile& f, uint64_t seed, int64_t step, int64_t B, int64_t T, int64_t a, int64_t b) {
  Batch out{std::vector<int32_t>(static_cast<size_t>((b - a) * T)),
            std::vector<int32_t>(static_cast<size_t>((b - a) * T))};
  sample_rows(f, seed, step, B, T, a, b, out.inputs.data(), out.targets.data());
  return out;
}

TEST(Sampler, SameSeedAndStepGiveSameRows) {
  const TokenFile f = ramp_file(10000);
  EXPECT_EQ(sample(f, 42, 3, 8, 16, 0, 8), sample(f, 42, 3, 8, 16, 0, 8));
}

TEST(Sampler, StepsAndSeedsDiffer) {
  const TokenFile f = ramp_file(10000);
  const Batch base = sample(f, 42, 3, 8, 16, 0, 8);
  EXPECT_NE(base, sample(f, 42, 4, 8, 16, 0, 8));
  EXPECT_NE(base, sample(f, 43, 3, 8, 16, 0, 8));
}

TEST(Sampler, FollowsTheDocumentedRule) {
  const int64_t n = 10000, B = 4, T = 16;
  const TokenFile f = ramp_file(n);
  const Batch b = sample(f, 7, 5, B, T, 0, B);
  const PhiloxKey key = philox_key(7, "data.sampler");
  for (int64_t i = 0; i < B; ++i) {
    const double u = philox_uniform(key, static_cast<uint64_t>(5 * B + i));
    const auto o = static_cast<int32_t>(u * static_cast<double>(n - T));
    EXPECT_EQ(b.inputs[static_cast<size_t>(i * T)], o) << "row " << i;
  }
}

TEST(Sampler, SliceEqualsRowsOfTheFullBatch) {
  const int64_t B = 12, T = 8;
  const TokenFile f = ramp_file(5000);
  const Batch full = sample(f, 1, 9, B, T, 0, B);
  for (const auto& [a, b] : {std::pair{0, 3}, std::pair{3, 7}, std::pair{7, 12}, std::pair{5, 5}}) {
    const Batch part = sample(f, 1, 9, B, T, a, b);
    EXPECT_EQ(part.inputs, std::vector<int32_t>(full.inputs.begin() + a * T, full.inputs.begin() + b * T));
    EXPECT_EQ(part.targets, std::vector<int32_t>(full.targets.begin() + a * T, full.targets.begin() + b * T));
  }
}

TEST(Sampler, TargetsAreInputsShiftedByOne) {
  const int64_t B = 16, T = 32, n = 600;
  const TokenFile f = ramp_file(n);
  const Batch b = sample(f, 3, 0, B, T, 0, B);
  for (int64_t r = 0; r < B; ++r) {
    const int32_t o = b.inputs[static_cast<size_t>(r * T)];
    EXPECT_GE(o, 0);
    EXPECT_LT(o + T, n);  // the last target is inside the file
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(b.inputs[static_cast<size_t>(r * T + t)], o + t);
      ASSERT_EQ(b.targets[static_cast<size_t>(r * T + t)], o + t + 1);
    }
  }
}

TEST(Sampler, SmallestFileUsesOffsetZero) {
  const TokenFile f = ramp_file(9);
  const Batch b = sample(f, 3, 2, 4, 8, 0, 4);
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(b.inputs[static_cast<size_t>(r * 8)], 0);
}

TEST(Sampler, TooShortFileIsDataError) {
  const TokenFile f = ramp_file(8);
  std::vector<int32_t> x(8), y(8);
  EXPECT_THROW_WITH(sample_rows(f, 0, 0, 1, 8, 0, 1, x.data(), y.data()), DataError, f.path(), "8 tokens",
                    "9");
}

TEST(Sampler, BadRowRangeIsConfigError) {
  const TokenFile f = ramp_file(100);
  std::vector<int32_t> x(64), y(64);
  EXPECT_THROW_WITH(sample_rows(f, 0, 0, 4, 8, 2, 5, x.data(), y.data()), ConfigError, "[2, 5)", "4");
  EXPECT_THROW_WITH(sample_rows(f, 0, -1, 4, 8, 0, 4, x.data(), y.data()), ConfigError, "step (-1)");
}

TEST(EvalWindows, ConsecutiveNonOverlappingWindows) {
  const int64_t T = 10;
  const TokenFile f = ramp_file(45);
  const EvalWindows w(f, T);
  EXPECT_EQ(w.count(), 4);  // (45 - 1) / 10
  std::vector<int32_t> x(static_cast<size_t>(4 * T)), y(static_cast<size_t>(4 * T));
  w.windows(0, 4, x.data(), y.data());
  for (int64_t i = 0; i < 4 * T; ++i) {
    EXPECT_EQ(x[static_cast<size_t>(i)], i);
    EXPECT_EQ(y[static_cast<size_t>(i)], i + 1);
  }
  std::vector<int32_t> x1(static_cast<size_t>(T)), y1(static_cast<size_t>(T));
  w.windows(3, 1, x1.data(), y1.data());
  EXPECT_EQ(x1.front(), 30);
  EXPECT_EQ(y1.back(), 40);
  EXPECT_THROW_WITH(w.windows(3, 2, x.data(), y.data()), ConfigError, "[3, 5)");
}

TEST(EvalWindows, ExactFitCountsAllWindows) {
  const TokenFile f = ramp_file(41);
  EXPECT_EQ(EvalWindows(f, 10).count(), 4);
}

TEST(EvalWindows, TooShortFileIsDataError) {
  const TokenFile f = ramp_file(10);
  EXPECT_THROW_WITH(EvalWindows(f, 10), DataError, f.path(), "10 tokens");
}

}  // namespace
}  // namespace mt

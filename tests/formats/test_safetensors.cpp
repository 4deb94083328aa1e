// Round trips, layout and 16-bit conversion of the safetensors reader/writer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "core/error.h"
#include "formats/half.h"
#include "formats/safetensors.h"
#include "formats/test_util.h"

namespace mt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::TempDir;

std::vector<float> iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = scale * static_cast<float>(i) - 1.0f;
  return v;
}

TEST(Safetensors, RoundTripShapesValuesAndMetadata) {
  TempDir dir;
  const std::string path = dir.file("model.safetensors");
  const std::vector<float> scalar = {3.25f};
  const std::vector<float> vec = iota(5, 0.5f);
  const std::vector<float> cube = iota(2 * 3 * 4, -0.125f);
  const std::vector<float> special = {std::numeric_limits<float>::infinity(), -0.0f,
                                      std::numeric_limits<float>::denorm_min(), std::nanf("")};
  write_safetensors(path,
                    {{"scalar", {}, scalar.data()},
                     {"layers.0.vec", {5}, vec.data()},
                     {"cube", {2, 3, 4}, cube.data()},
                     {"empty", {0, 7}, nullptr},
                     {"special", {4}, special.data()}},
                    {{"format", "pt"}, {"step", "42"}});

  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_THAT(f.names(), ElementsAre("scalar", "layers.0.vec", "cube", "empty", "special"));
  EXPECT_TRUE(f.has("cube"));
  EXPECT_FALSE(f.has("missing"));
  EXPECT_TRUE(f.shape("scalar").empty());
  EXPECT_EQ(f.numel("scalar"), 1);
  EXPECT_THAT(f.shape("cube"), ElementsAre(2, 3, 4));
  EXPECT_THAT(f.shape("empty"), ElementsAre(0, 7));
  EXPECT_EQ(f.numel("empty"), 0);
  EXPECT_EQ(f.dtype("cube"), "F32");
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"step", "42"}}));

  float s = 0;
  f.read_f32("scalar", &s, 1);
  EXPECT_EQ(s, 3.25f);
  std::vector<float> got(24);
  f.read_f32("cube", got.data(), 24);
  EXPECT_EQ(got, cube);
  got.assign(5, 0);
  f.read_f32("layers.0.vec", got.data(), 5);
  EXPECT_EQ(got, vec);
  f.read_f32("empty", nullptr, 0);
  got.assign(4, 0);
  f.read_f32("special", got.data(), 4);
  for (int i = 0; i < 4; ++i) {  // bit for bit, NaN included
    EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(special[i])) << i;
  }
}

TEST(Safetensors, HeaderIsPaddedWithSpacesToEightBytes) {
  TempDir dir;
  const std::vector<float> v = iota(3, 1.0f);
  // Names of several lengths, so that the unpadded header length varies.
  for (const std::string name : {"a", "ab", "abc", "abcd", "abcde", "abcdef", "abcdefg", "abcdefgh"}) {
    const std::string path = dir.file(name + ".safetensors");
    write_safetensors(path, {{name, {3}, v.data()}});
    const std::string bytes = testing::read_bytes(path);
    ASSERT_GE(bytes.size(), 8u);
    uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    EXPECT_EQ(n % 8, 0u) << name;
    ASSERT_EQ(bytes.size(), 8 + n + 12) << name;
    const std::string header = bytes.substr(8, n);
    const size_t close = header.find_last_of('}');
    ASSERT_NE(close, std::string::npos);
    EXPECT_EQ(header.substr(close + 1), std::string(n - close - 1, ' ')) << name;
    EXPECT_EQ(std::memcmp(bytes.data() + 8 + n, v.data(), 12), 0) << name;
  }
}

TEST(Safetensors, WriteReplacesAtomicallyAndLeavesNoTemporaryFiles) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const std::vector<float> a = {1, 2}, b = {3, 4, 5};
  write_safetensors(path, {{"x", {2}, a.data()}});
  write_safetensors(path, {{"y", {3}, b.data()}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_THAT(f.names(), ElementsAre("y"));
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path())) {
    ++files;
    EXPECT_EQ(e.path().filename(), "w.safetensors");
  }
  EXPECT_EQ(files, 1);
}

TEST(Safetensors, WriteFailuresAreIoErrorsNamingThePath) {
  TempDir dir;
  const std::vector<float> a = {1};
  const std::string missing_dir = dir.file("no/such/dir/x.safetensors");
  try {
    write_safetensors(missing_dir, {{"x", {1}, a.data()}});
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(missing_dir));
    EXPECT_THAT(e.what(), HasSubstr("No such file or directory"));
  }
  // Renaming over a directory fails; the temporary file must not survive.
  std::filesystem::create_directory(dir.file("taken"));
  EXPECT_THROW(write_safetensors(dir.file("taken"), {{"x", {1}, a.data()}}), IoError);
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir.path()))
    ++files;
  EXPECT_EQ(files, 1);
}

TEST(Safetensors, WriterRejectsBadTensorsBeforeCreatingTheFile) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const std::vector<float> a = {1, 2};
  EXPECT_THROW(write_safetensors(path, {{"x", {2}, a.data()}, {"x", {2}, a.data()}}), ConfigError);
  EXPECT_THROW(write_safetensors(path, {{"", {2}, a.data()}}), ConfigError);
  EXPECT_THROW(write_safetensors(path, {{"__metadata__", {2}, a.data()}}), ConfigError);
  EXPECT_THROW(write_safetensors(path, {{"x", {-2}, a.data()}}), ConfigError);
  EXPECT_THROW(write_safetensors(path, {{"x", {2}, nullptr}}), ConfigError);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(Safetensors, ReadsBf16AndF16FromHandBuiltHeader) {
  TempDir dir;
  const std::string path = dir.file("half.safetensors");
  // bf16: 1.0, -2.0, 3.140625 (0x4049), smallest subnormal, inf; then f16: 1.0,
  // -2.0, 65504 (largest), 2^-24 (smallest subnormal), 2^-14 (smallest normal),
  // -inf, -0.0. One byte of header padding leaves the f16 data misaligned.
  const uint16_t bf16[] = {0x3f80, 0xc000, 0x4049, 0x0001, 0x7f80};
  const uint16_t f16[] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x0400, 0xfc00, 0x8000};
  std::string data(reinterpret_cast<const char*>(bf16), sizeof(bf16));
  data += std::string(reinterpret_cast<const char*>(f16), sizeof(f16));
  const std::string header = R"({"b":{"dtype":"BF16","shape":[5],"data_offsets":[0,10]},)"
                             R"("h":{"dtype":"F16","shape":[7,1],"data_offsets":[10,24]}} )";
  testing::write_bytes(path, testing::safetensors_bytes(header, data));

  const SafetensorsFile f = SafetensorsFile::open(path);
  EXPECT_EQ(f.dtype("b"), "BF16");
  std::vector<float> b(5), h(7);
  f.read_f32("b", b.data(), 5);
  f.read_f32("h", h.data(), 7);
  EXPECT_EQ(b[0], 1.0f);
  EXPECT_EQ(b[1], -2.0f);
  EXPECT_EQ(b[2], 3.140625f);
  EXPECT_EQ(b[3], std::bit_cast<float>(0x00010000u));
  EXPECT_EQ(b[4], std::numeric_limits<float>::infinity());
  EXPECT_EQ(h[0], 1.0f);
  EXPECT_EQ(h[1], -2.0f);
  EXPECT_EQ(h[2], 65504.0f);
  EXPECT_EQ(h[3], std::ldexp(1.0f, -24));
  EXPECT_EQ(h[4], std::ldexp(1.0f, -14));
  EXPECT_EQ(h[5], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(std::bit_cast<uint32_t>(h[6]), 0x80000000u);
}

// Ranged reads (what a checkpoint loader uses to take only the rows it needs):
// element e of "cube" is iota's value e, so each range is checked against
// values written independently of the reader.
TEST(Safetensors, RangedReadsTakeExactlyTheRequestedElements) {
  TempDir dir;
  const std::string path = dir.file("ranges.safetensors");
  const std::vector<float> before = iota(3, 2.0f), cube = iota(4 * 3 * 2, 0.25f);
  write_safetensors(path, {{"before", {3}, before.data()}, {"cube", {4, 3, 2}, cube.data()}});
  const SafetensorsFile f = SafetensorsFile::open(path);
  std::vector<float> got(12, 99.0f);
  f.read_f32_range("cube", 6, 12, got.data());  // rows 1 and 2 of dim 0
  EXPECT_EQ(got, std::vector<float>(cube.begin() + 6, cube.begin() + 18));
  got.assign(3, 99.0f);
  f.read_f32_range("cube", 21, 3, got.data());  // the last three elements
  EXPECT_THAT(got, ElementsAre(cube[21], cube[22], cube[23]));
  f.read_f32_range("cube", 24, 0, got.data());  // empty, at the end
  EXPECT_THAT(got, ElementsAre(cube[21], cube[22], cube[23]));
  for (auto [first, n] : {std::pair<int64_t, int64_t>{-1, 2}, {23, 2}, {25, 0}, {0, -1}}) {
    try {
      f.read_f32_range("cube", first, n, got.data());
      FAIL() << "expected DataError for [" << first << ", +" << n << ")";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr("of tensor 'cube' are not inside its 24"));
    }
  }
  // 16-bit: a range starting inside the tensor converts just those elements.
  const std::string half = dir.file("half.safetensors");
  const uint16_t bf16[] = {0x3f80, 0xc000, 0x4049, 0x4080};  // 1, -2, 3.140625, 4
  testing::write_bytes(
      half, testing::safetensors_bytes(R"({"b":{"dtype":"BF16","shape":[2,2],"data_offsets":[0,8]}})",
                                       std::string(reinterpret_cast<const char*>(bf16), 8)));
  const SafetensorsFile h = SafetensorsFile::open(half);
  got.assign(2, 0.0f);
  h.read_f32_range("b", 1, 2, got.data());
  EXPECT_THAT(got, ElementsAre(-2.0f, 3.140625f));
}

TEST(Half, F16NanStaysNanAndSubnormalsAreExact) {
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0xfc01)));
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7fc0)));
  EXPECT_EQ(f16_to_f32(0x03ff), 1023.0f * std::ldexp(1.0f, -24));  // largest subnormal
  EXPECT_EQ(f16_to_f32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x3555), (1.0f + 0x155 / 1024.0f) * 0.25f);  // 0.333252
}

}  // namespace
}  // namespace mt

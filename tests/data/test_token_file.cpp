#include <cstring>
#include <vector>

#include "core/error.h"
#include "data/test_util.h"
#include "data/token_file.h"

namespace mt {
namespace {

using testing_data::fresh_dir;

std::vector<int32_t> ramp(int64_t n, int64_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    v[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919) % vocab);
  return v;
}

// Raw bytes of a file, to corrupt it.
std::string bytes_of(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

void put_u32(std::string& bytes, size_t at, uint32_t v) {
  std::memcpy(bytes.data() + at, &v, 4);
}

TEST(TokenFile, RoundTripUint16) {
  const auto path = (fresh_dir() / "t.bin").string();
  const auto tokens = ramp(1000, 65536);
  write_token_file(path, tokens, 65536);
  EXPECT_EQ(std::filesystem::file_size(path), 32u + 2u * 1000u);
  const TokenFile f = TokenFile::open(path);
  EXPECT_EQ(f.dtype(), TokenDType::u16);
  EXPECT_EQ(f.size(), 1000);
  EXPECT_EQ(f.vocab_size(), 65536);
  for (int64_t i = 0; i < f.size(); ++i)
    ASSERT_EQ(f[i], tokens[static_cast<size_t>(i)]) << i;
  std::vector<int32_t> part(10);
  f.copy(990, 10, part.data());
  EXPECT_EQ(part, std::vector<int32_t>(tokens.end() - 10, tokens.end()));
}

TEST(TokenFile, RoundTripUint32) {
  const auto path = (fresh_dir() / "t.bin").string();
  auto tokens = ramp(500, 100000);
  tokens.push_back(99999);  // above 16 bits
  write_token_file(path, tokens, 100000);
  EXPECT_EQ(std::filesystem::file_size(path), 32u + 4u * 501u);
  const TokenFile f = TokenFile::open(path);
  EXPECT_EQ(f.dtype(), TokenDType::u32);
  std::vector<int32_t> all(tokens.size());
  f.copy(0, f.size(), all.data());
  EXPECT_EQ(all, tokens);
}

TEST(TokenFile, HeaderBytesAreLittleEndianAsDocumented) {
  const auto path = (fresh_dir() / "t.bin").string();
  write_token_file(path, std::vector<int32_t>{1, 258}, 300);
  const std::string b = bytes_of(path);
  const std::string expected("MTTOKENS\1\0\0\0\1\0\0\0\x2c\1\0\0\0\0\0\0\2\0\0\0\0\0\0\0\1\0\2\1", 36);
  EXPECT_EQ(b, expected);
}

TEST(TokenFile, MoveKeepsMappingAlive) {
  const auto path = (fresh_dir() / "t.bin").string();
  write_token_file(path, std::vector<int32_t>{5, 6, 7}, 10);
  TokenFile a = TokenFile::open(path);
  TokenFile b = std::move(a);
  EXPECT_EQ(a.size(), 0);  // NOLINT(bugprone-use-after-move): moved-from is empty
  EXPECT_EQ(b[2], 7);
}

TEST(TokenFile, WriterRejectsIdOutsideVocab) {
  const auto path = (fresh_dir() / "t.bin").string();
  EXPECT_THROW_WITH(write_token_file(path, std::vector<int32_t>{1, 12}, 10), DataError, "12",
                    "vocab_size = 10");
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(TokenFile, MissingFileIsIoError) {
  const auto path = (fresh_dir() / "nope.bin").string();
  EXPECT_THROW_WITH(TokenFile::open(path), IoError, path, "No such file");
}

class CorruptTokenFile : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fresh_dir() / "t.bin").string();
    write_token_file(path_, std::vector<int32_t>{1, 2, 3, 4}, 10);
    bytes_ = bytes_of(path_);
  }
  void rewrite() { testing_data::write_text(path_, bytes_); }
  std::string path_, bytes_;
};

TEST_F(CorruptTokenFile, WrongMagic) {
  std::memcpy(bytes_.data(), "GARBAGE!", 8);
  rewrite();
  EXPECT_THROW_WITH(TokenFile::open(path_), DataError, path_, "GARBAGE!", "MTTOKENS");
}

TEST_F(CorruptTokenFile, UnsupportedVersion) {
  put_u32(bytes_, 8, 7);
  rewrite();
  EXPECT_THROW_WITH(TokenFile::open(path_), DataError, path_, "version 7");
}

TEST_F(CorruptTokenFile, BadDtype) {
  put_u32(bytes_, 12, 3);
  rewrite();
  EXPECT_THROW_WITH(TokenFile::open(path_), DataError, path_, "dtype 3");
}

TEST_F(CorruptTokenFile, Truncated) {
  bytes_.resize(bytes_.size() - 1);
  rewrite();
  EXPECT_THROW_WITH(TokenFile::open(path_), DataError, path_, "truncated", "= 40 bytes", "has 39 bytes");
}

TEST_F(CorruptTokenFile, TrailingBytes) {
  bytes_ += "xx";
  rewrite();
  EXPECT_THROW_WITH(TokenFile::open(path_), DataError, path_, "= 40 bytes", "has 42 bytes");
}

TEST_F(CorruptTokenFile, HugeCountDoesNotOverflow) {
  const uint64_t count = ~uint64_t{0};
  std::memcpy(bytes_.data() + 24, &count, 8);
  rewrite();
  EXPECT_THROW_WITH(TokenFile::open(path_), DataError, path_, "truncated", "18446744073709551615");
}

TEST_F(CorruptTokenFile, ShorterThanHeader) {
  bytes_.resize(10);
  rewrite();
  EXPECT_THROW_WITH(TokenFile::open(path_), DataError, path_, "10 bytes");
}

TEST_F(CorruptTokenFile, TokenIdNotBelowVocab) {
  const uint16_t bad = 10;  // vocab_size is 10
  std::memcpy(bytes_.data() + 32 + 2 * 2, &bad, 2);
  rewrite();
  EXPECT_THROW_WITH(TokenFile::open(path_), DataError, path_, "offset 2", "id 10", "vocab_size (10)");
}

}  // namespace
}  // namespace mt

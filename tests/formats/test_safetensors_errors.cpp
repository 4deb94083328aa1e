// Malformed safetensors files, built byte by byte: each gives a typed error
// whose message names the file and the rule; none crashes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "formats/safetensors.h"
#include "formats/test_util.h"

namespace mt {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

// Opens `bytes` written to a file and expects a DataError mentioning `needle`.
void expect_bad(const TempDir& dir, const std::string& bytes, const std::string& needle) {
  const std::string path = dir.file("bad.safetensors");
  testing::write_bytes(path, bytes);
  try {
    SafetensorsFile::open(path);
    ADD_FAILURE() << "expected DataError containing \"" << needle << "\"";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr(needle));
  }
}

std::string entry(const std::string& body) {
  return R"({"t":{)" + body + "}}";
}

TEST(SafetensorsErrors, MissingFileIsIoError) {
  TempDir dir;
  const std::string path = dir.file("absent.safetensors");
  try {
    SafetensorsFile::open(path);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_THAT(e.what(), HasSubstr(path));
    EXPECT_THAT(e.what(), HasSubstr("No such file"));
  }
}

TEST(SafetensorsErrors, FileShorterThanLengthField) {
  TempDir dir;
  expect_bad(dir, "", "0 bytes is shorter than the 8-byte header length");
  expect_bad(dir, "abcde", "5 bytes is shorter than the 8-byte header length");
}

TEST(SafetensorsErrors, HeaderLengthBeyondFile) {
  TempDir dir;
  std::string bytes = testing::safetensors_bytes("{}", "");
  bytes[0] = 100;
  expect_bad(dir, bytes, "header length 100 exceeds the 2 bytes");
  bytes.replace(0, 8, std::string(8, '\xff'));  // 2^64 - 1: must not overflow
  expect_bad(dir, bytes, "header length 18446744073709551615 exceeds");
}

TEST(SafetensorsErrors, HeaderNotJsonOrNotObject) {
  TempDir dir;
  expect_bad(dir, testing::safetensors_bytes("{\"t\": [", ""), "header is not valid JSON");
  expect_bad(dir, testing::safetensors_bytes("", ""), "header is not valid JSON");
  expect_bad(dir, testing::safetensors_bytes("[1, 2]", ""), "header must be a JSON object, got array");
  expect_bad(dir, testing::safetensors_bytes(R"({"t": 3})", ""), "entry 't' must be an object, got 3");
}

TEST(SafetensorsErrors, EntryWithoutRequiredField) {
  TempDir dir;
  const std::string data(8, '\0');
  expect_bad(dir, testing::safetensors_bytes(entry(R"("shape":[2],"data_offsets":[0,8])"), data),
             "tensor 't' has no \"dtype\"");
  expect_bad(dir, testing::safetensors_bytes(entry(R"("dtype":"F32","data_offsets":[0,8])"), data),
             "tensor 't' has no \"shape\"");
  expect_bad(dir, testing::safetensors_bytes(entry(R"("dtype":"F32","shape":[2])"), data),
             "tensor 't' has no \"data_offsets\"");
}

TEST(SafetensorsErrors, BadFieldValues) {
  TempDir dir;
  const std::string data(8, '\0');
  auto bytes = [&](const std::string& body) { return testing::safetensors_bytes(entry(body), data); };
  expect_bad(dir, bytes(R"("dtype":"Q7","shape":[2],"data_offsets":[0,8])"), "unsupported dtype 'Q7'");
  expect_bad(dir, bytes(R"("dtype":7,"shape":[2],"data_offsets":[0,8])"), "dtype must be a string, got 7");
  expect_bad(dir, bytes(R"("dtype":"F32","shape":[-2],"data_offsets":[0,8])"),
             "must hold non-negative integers");
  expect_bad(dir, bytes(R"("dtype":"F32","shape":[2.0],"data_offsets":[0,8])"),
             "must hold non-negative integers");
  expect_bad(dir, bytes(R"("dtype":"F32","shape":2,"data_offsets":[0,8])"), "shape must be an array");
  expect_bad(dir, bytes(R"("dtype":"F32","shape":[4294967296,4294967296,4],"data_offsets":[0,8])"),
             "has too many elements");
  expect_bad(dir, bytes(R"("dtype":"F32","shape":[2],"data_offsets":[0])"),
             "data_offsets must be [begin, end]");
  expect_bad(dir, bytes(R"("dtype":"F32","shape":[2],"data_offsets":[-1,8])"),
             "data_offsets must be [begin, end]");
  expect_bad(dir, testing::safetensors_bytes(R"({"__metadata__":{"k":1}})", ""),
             "__metadata__ value of 'k' must be a string, got 1");
  expect_bad(dir, testing::safetensors_bytes(R"({"__metadata__":[]})", ""), "__metadata__ must be an object");
}

TEST(SafetensorsErrors, OffsetsOutOfRangeOrWrongSize) {
  TempDir dir;
  const std::string data(8, '\0');
  auto bytes = [&](const std::string& body) { return testing::safetensors_bytes(entry(body), data); };
  expect_bad(dir, bytes(R"("dtype":"F32","shape":[4],"data_offsets":[0,16])"),
             "data_offsets [0,16] must satisfy begin <= end <= data buffer size (8 bytes)");
  expect_bad(dir, bytes(R"("dtype":"F32","shape":[0],"data_offsets":[8,4])"), "must satisfy begin <= end");
  expect_bad(dir, bytes(R"("dtype":"F32","shape":[3],"data_offsets":[0,8])"),
             "span 8 bytes but shape [3] of F32 needs 3 x 4 bytes");
  expect_bad(dir, bytes(R"("dtype":"BF16","shape":[2,3],"data_offsets":[0,8])"),
             "span 8 bytes but shape [2,3] of BF16 needs 6 x 2 bytes");
}

TEST(SafetensorsErrors, TensorsMustTileTheDataBuffer) {
  TempDir dir;
  auto two = [](const std::string& a, const std::string& b) {
    return R"({"a":{"dtype":"F32","shape":[1],"data_offsets":)" + a + R"(},"b":{"dtype":"F32","shape":[1],)" +
           R"("data_offsets":)" + b + "}}";
  };
  expect_bad(dir, testing::safetensors_bytes(two("[0,4]", "[8,12]"), std::string(12, '\0')),
             "tensor 'b' begins at byte 8 of the data buffer but the tensors before it end at byte 4 (gap)");
  expect_bad(dir, testing::safetensors_bytes(two("[4,8]", "[8,12]"), std::string(12, '\0')),
             "tensor 'a' begins at byte 4 of the data buffer but the tensors before it end at byte 0 (gap)");
  expect_bad(dir, testing::safetensors_bytes(two("[0,4]", "[2,6]"), std::string(6, '\0')), "(overlap)");
  expect_bad(dir, testing::safetensors_bytes(two("[0,4]", "[0,4]"), std::string(4, '\0')), "(overlap)");
  expect_bad(dir, testing::safetensors_bytes(two("[0,4]", "[4,8]"), std::string(9, '\0')),
             "the tensors cover 8 bytes but the data buffer holds 9 (trailing bytes)");
  expect_bad(dir, testing::safetensors_bytes("{}", "xy"),
             "the tensors cover 0 bytes but the data buffer holds 2");
  // The tensors in header order need not be in offset order.
  const std::string path = dir.file("swapped.safetensors");
  testing::write_bytes(path, testing::safetensors_bytes(two("[4,8]", "[0,4]"), std::string(8, '\0')));
  EXPECT_EQ(SafetensorsFile::open(path).names().size(), 2u);
}

TEST(SafetensorsErrors, BytesInsertedAfterTheHeaderAreRefused) {
  // Four bytes inserted after the header shift every tensor: the header still
  // parses and every span still fits, but the data no longer tiles.
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  write_safetensors(good, {{"w", {2, 3}, v.data()}}, {});
  std::string bytes = testing::read_bytes(good);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  bytes.insert(8 + header_len, "\x01\x02\x03\x04");
  expect_bad(dir, bytes, "the tensors cover 24 bytes but the data buffer holds 28 (trailing bytes)");
}

TEST(SafetensorsErrors, ReaderCallerErrors) {
  TempDir dir;
  const std::string path = dir.file("ok.safetensors");
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("i":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})";
  testing::write_bytes(path, testing::safetensors_bytes(header, std::string(16, '\0')));
  const SafetensorsFile f = SafetensorsFile::open(path);
  float out[2];
  try {
    f.read_f32("b", out, 2);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("no tensor named 'b'; the file holds 2 tensors: a, i"));
    EXPECT_THAT(e.what(), HasSubstr(path));
  }
  EXPECT_THROW(f.shape("b"), DataError);
  try {
    f.read_f32("a", out, 3);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("tensor 'a' has 2 elements but the destination holds 3"));
  }
  try {
    f.read_f32("i", out, 1);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("dtype I64; only F32, BF16 and F16"));
  }
}

TEST(SafetensorsErrors, EveryTruncationAndByteFlipFailsCleanly) {
  // A valid file cut at every length, and with every byte of its header
  // replaced, either opens or throws mt::Error; nothing crashes.
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  write_safetensors(good, {{"w", {2, 3}, v.data()}, {"b", {}, v.data()}}, {{"k", "v"}});
  const std::string bytes = testing::read_bytes(good);
  const std::string path = dir.file("mangled.safetensors");
  int opened = 0, failed = 0;
  auto attempt = [&](const std::string& content) {
    testing::write_bytes(path, content);
    try {
      const SafetensorsFile f = SafetensorsFile::open(path);
      for (const std::string& name : f.names()) {
        std::vector<float> out(static_cast<size_t>(f.numel(name)));
        try {
          f.read_f32(name, out.data(), f.numel(name));
        } catch (const DataError&) {  // a flipped dtype may be valid but not readable as fp32
        }
      }
      ++opened;
    } catch (const Error&) {
      ++failed;
    }
  };
  for (size_t len = 0; len < bytes.size(); ++len)
    attempt(bytes.substr(0, len));
  for (size_t i = 0; i < bytes.size() - 28; ++i) {
    for (char c : {'\0', '9', '}'}) {
      std::string m = bytes;
      m[i] = c;
      attempt(m);
    }
  }
  EXPECT_GT(failed, 0);
  EXPECT_GT(opened, 0);
}

}  // namespace
}  // namespace mt

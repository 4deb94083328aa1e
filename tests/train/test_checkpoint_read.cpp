// The checkpoint reader (ckpt/checkpoint_read.h) on hand-built checkpoints:
// a [5, 4, 3] tensor whose element (i, j, k) is 100·i + 10·j + k, saved as
// slices cut along dim 0 and dim 1, read back into boxes that cut across them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/checkpoint_meta.h"
#include "ckpt/checkpoint_read.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "formats/safetensors.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

float value(int64_t i, int64_t j, int64_t k) {
  return static_cast<float>(100 * i + 10 * j + k);
}

struct Box {
  std::vector<int64_t> off, size;
};

// The box's elements by the formula; `sign` −1 for the exp_avg copy.
std::vector<float> expected(const Box& b, float sign = 1.0f) {
  std::vector<float> out;
  for (int64_t i = b.off[0]; i < b.off[0] + b.size[0]; ++i)
    for (int64_t j = b.off[1]; j < b.off[1] + b.size[1]; ++j)
      for (int64_t k = b.off[2]; k < b.off[2] + b.size[2]; ++k)
        out.push_back(sign * value(i, j, k));
  return out;
}

std::string json_of(const std::vector<int64_t>& v) {
  std::string t = "[";
  for (size_t d = 0; d < v.size(); ++d) {
    if (d > 0) t += ',';
    t += std::to_string(v[d]);
  }
  t += ']';
  return t;
}

std::string crc_of(const std::vector<float>& x) {
  return crc_hex(crc32c(x.data(), 4 * x.size()));
}

// Writes one file per box (tensor "t", "t.exp_avg" = −t and "t.exp_avg_sq" =
// 2t) and a metadata.json listing them with their checksums, computed here
// from the values and the file's first 8 + N bytes; `listed` boxes go into
// metadata.json (default: the written ones).
class Checkpoint {
 public:
  Checkpoint(const std::vector<Box>& boxes, const std::vector<Box>& listed = {}) {
    dir_ = fs::temp_directory_path() / ("mt_ckpt_read_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    nlohmann::json files = nlohmann::json::array();
    const std::vector<Box>& meta = listed.empty() ? boxes : listed;
    for (size_t f = 0; f < boxes.size(); ++f) {
      const std::vector<float> p = expected(boxes[f]), m = expected(boxes[f], -1.0f),
                               v = expected(boxes[f], 2.0f);
      const std::string name = "rank-" + std::to_string(f) + ".safetensors";
      write_safetensors((dir_ / name).string(), {{"t", boxes[f].size, p.data()},
                                                 {"t.exp_avg", boxes[f].size, m.data()},
                                                 {"t.exp_avg_sq", boxes[f].size, v.data()}});
      if (f >= meta.size()) continue;
      std::ifstream in(dir_ / name, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      uint64_t header = 0;
      std::memcpy(&header, bytes.data(), 8);
      files.push_back({{"name", name},
                       {"bytes", bytes.size()},
                       {"header_crc32c", crc_hex(crc32c(bytes.data(), 8 + header))},
                       {"slices",
                        {{{"tensor", "t"},
                          {"offsets", meta[f].off},
                          {"shape", meta[f].size},
                          {"crc32c", {crc_of(p), crc_of(m), crc_of(v)}}}}}});
    }
    nlohmann::json doc = {{"format_version", kCheckpointFormatVersion},
                          {"step", 0},
                          {"bad_steps", 0},
                          {"adam_steps", 0},
                          {"config", nlohmann::json::object()},
                          {"states", {"", ".exp_avg", ".exp_avg_sq"}},
                          {"tensors", {{"t", {{"shape", {5, 4, 3}}, {"dtype", "F32"}}}}},
                          {"files", files}};
    doc["metadata_crc32c"] = metadata_checksum(doc);  // sealed as a save seals it
    std::ofstream(dir_ / "metadata.json") << doc.dump();
  }
  ~Checkpoint() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir() const { return dir_.string(); }
  std::string file(int f) const { return (dir_ / ("rank-" + std::to_string(f) + ".safetensors")).string(); }

 private:
  fs::path dir_;
};

// XORs byte `at` of `path` (negative: from the end) with 0x55, in place.
void flip(const std::string& path, int64_t at) {
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(0, std::ios::end);
  const int64_t pos = at >= 0 ? at : static_cast<int64_t>(io.tellg()) + at;
  io.seekg(pos);
  char c = 0;
  io.get(c);
  io.seekp(pos);
  io.put(static_cast<char>(c ^ 0x55));
}

// Rows 0-1 whole; rows 2-4 cut along dim 1 into columns 0-2 and 3.
const std::vector<Box> kSaved = {{{0, 0, 0}, {2, 4, 3}}, {{2, 0, 0}, {3, 3, 3}}, {{2, 3, 0}, {3, 1, 3}}};

TEST(CheckpointRead, AnyBoxFromTheSlicesThatIntersectIt) {
  const Checkpoint ck(kSaved);
  CheckpointReader reader(ck.dir());
  EXPECT_EQ(reader.tensor_bytes(), 3 * 4 * 60);
  int64_t bytes = 0;
  for (const Box& b : {Box{{0, 0, 0}, {5, 4, 3}}, Box{{1, 1, 1}, {3, 3, 2}}, Box{{3, 2, 0}, {2, 2, 3}},
                       Box{{4, 3, 2}, {1, 1, 1}}, Box{{0, 1, 0}, {5, 1, 3}}}) {
    std::vector<float> got(expected(b).size(), -1.0f);
    reader.read_box("t", "", b.off, b.size, got.data());
    EXPECT_EQ(got, expected(b)) << json_of(b.off) << " + " << json_of(b.size);
    bytes += 4 * static_cast<int64_t>(got.size());
    EXPECT_EQ(reader.bytes_read(), bytes) << "each element of the box read once, no other";
  }
  const Box b{{1, 2, 0}, {3, 2, 3}};
  std::vector<float> got(expected(b).size());
  reader.read_box("t", ".exp_avg", b.off, b.size, got.data());
  EXPECT_EQ(got, expected(b, -1.0f));
}

TEST(CheckpointRead, AHoleIsFoundBeforeAnyReadNamingTheTensor) {
  const Checkpoint ck(kSaved, {kSaved[0], kSaved[1]});  // the column-3 slice is not listed
  try {
    CheckpointReader reader(ck.dir());
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("the saved slices of 't' cover 51 of its 60 elements"));
  }
}

// A rank checks the slices it reads, whole, and no others: a flipped byte in
// slice 2's exp_avg goes unseen by a reader of slices 0 and 1 or of slice 2's
// parameters, and a reader of slice 2's exp_avg is refused, naming the file,
// the stored tensor and the slice.
TEST(CheckpointRead, EachSliceIsCheckedByItsReaders) {
  const Checkpoint ck(kSaved);
  flip(ck.file(2), -4 * 9 - 1);  // the last byte of t.exp_avg (t.exp_avg_sq's 9 floats follow)
  CheckpointReader reader(ck.dir());
  std::vector<float> got(6);
  reader.read_box("t", ".exp_avg", {0, 0, 0}, {1, 2, 3}, got.data());  // inside slice 0
  EXPECT_EQ(got, expected({{0, 0, 0}, {1, 2, 3}}, -1.0f));
  EXPECT_EQ(reader.bytes_checked(), 4 * 24) << "slice 0's exp_avg, whole, and nothing else";
  EXPECT_EQ(reader.bytes_read(), 4 * 6);
  got.resize(60);
  reader.read_box("t", "", {0, 0, 0}, {5, 4, 3}, got.data());
  EXPECT_EQ(reader.bytes_checked(), 4 * (24 + 60));
  try {
    reader.read_box("t", ".exp_avg", {4, 3, 2}, {1, 1, 1}, got.data());
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr(ck.file(2) + ": CRC32C mismatch in 't.exp_avg' (the slice [2:5, 3:4, 0:3] "
                                       "of tensor 't'"));
  }
  CheckpointReader all(ck.dir());
  EXPECT_THROW(all.verify_all(), DataError);
}

TEST(CheckpointRead, AFlippedHeaderOrATruncatedFileIsRefusedByName) {
  {
    const Checkpoint ck(kSaved);
    flip(ck.file(1), 12);  // inside the JSON header
    CheckpointReader reader(ck.dir());
    try {
      reader.verify_box("t", "", {2, 0, 0}, {1, 1, 1});
      FAIL() << "expected DataError";
    } catch (const Error& e) {  // DataError: the header's CRC, or the header no longer parses
      EXPECT_THAT(e.what(), HasSubstr(ck.file(1)));
    }
  }
  const Checkpoint ck(kSaved);
  fs::resize_file(ck.file(0), fs::file_size(ck.file(0)) - 4);
  CheckpointReader reader(ck.dir());
  try {
    reader.verify_box("t", "", {0, 0, 0}, {1, 1, 1});
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(ck.file(0) + " has "));
    EXPECT_THAT(e.what(), HasSubstr("(truncated)"));
  }
}

TEST(CheckpointRead, OverlappingOrOutsideSlicesAreRefused) {
  {
    const Checkpoint ck(kSaved, {kSaved[0], {{1, 0, 0}, {3, 3, 3}}, kSaved[2]});
    try {
      CheckpointReader reader(ck.dir());
      FAIL() << "expected DataError";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr("of 't' overlap"));
    }
  }
  const Checkpoint ck(kSaved, {kSaved[0], kSaved[1], {{2, 3, 0}, {4, 1, 3}}});
  EXPECT_THROW(CheckpointReader reader(ck.dir()), DataError);  // rows 2-5 of a 5-row tensor
}

}  // namespace
}  // namespace mt

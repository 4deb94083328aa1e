// The checkpoint reader (train/checkpoint_read.h) on hand-built checkpoints:
// a [5, 4, 3] tensor whose element (i, j, k) is 100·i + 10·j + k, saved as
// slices cut along dim 0 and dim 1, read back into boxes that cut across them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "train/checkpoint_meta.h"
#include "train/checkpoint_read.h"

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

// Writes one file per box (tensor "t" and "t.exp_avg" = −t) and a
// metadata.json listing them; `listed` boxes go into metadata.json (default:
// the written ones).
class Checkpoint {
 public:
  Checkpoint(const std::vector<Box>& boxes, const std::vector<Box>& listed = {}) {
    dir_ = fs::temp_directory_path() / ("mt_ckpt_read_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    std::string files;
    const std::vector<Box>& meta = listed.empty() ? boxes : listed;
    for (size_t f = 0; f < boxes.size(); ++f) {
      const std::vector<float> p = expected(boxes[f]), m = expected(boxes[f], -1.0f);
      const std::string name = "rank-" + std::to_string(f) + ".safetensors";
      write_safetensors((dir_ / name).string(),
                        {{"t", boxes[f].size, p.data()}, {"t.exp_avg", boxes[f].size, m.data()}});
      if (f >= meta.size()) continue;
      if (!files.empty()) files += ',';
      files += R"({"name":")";
      files += name;
      files += R"(","slices":[{"tensor":"t","offsets":)";
      files += json_of(meta[f].off);
      files += R"(,"shape":)";
      files += json_of(meta[f].size);
      files += "}]}";
    }
    nlohmann::json doc = nlohmann::json::parse(
        R"({"format_version":1,"tensors":{"t":{"shape":[5,4,3],"dtype":"F32"}},"files":[)" + files + "]}");
    doc["metadata_crc32c"] = metadata_checksum(doc);  // sealed as a save seals it
    std::ofstream(dir_ / "metadata.json") << doc.dump();
  }
  ~Checkpoint() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
};

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

TEST(CheckpointRead, AHoleNamesTheTensor) {
  const Checkpoint ck(kSaved, {kSaved[0], kSaved[1]});  // the column-3 slice is not listed
  CheckpointReader reader(ck.dir());
  std::vector<float> got(60);
  try {
    reader.read_box("t", "", {0, 0, 0}, {5, 4, 3}, got.data());
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("the saved slices of 't' cover 51 of the 60 elements of [0:5, 0:4, 0:3]"));
  }
  got.resize(6);  // a box inside the listed slices still reads
  reader.read_box("t", "", {0, 0, 0}, {1, 2, 3}, got.data());
  EXPECT_EQ(got, expected({{0, 0, 0}, {1, 2, 3}}));
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

// Which checkpoint --resume picks (train/checkpoint.h resolve_resume) on
// hand-made checkpoint folders: `latest` is the authority, a damaged one is
// passed over with a warning that names it and says why, the next older one
// is taken, and with none usable the run starts fresh; --resume PATH to a
// damaged checkpoint is an error. resolve_resume reads no shard file: a
// slice's checksum is checked by the rank that reads it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file.h"
#include "train/checkpoint.h"
#include "train/checkpoint_meta.h"
#include "train/checkpoint_read.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class Root {
 public:
  Root() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("mt_resume_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~Root() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  Root(const Root&) = delete;
  Root& operator=(const Root&) = delete;

  std::string str() const { return path_.string(); }
  std::string dir(int64_t step) const { return (path_ / checkpoint_name(step)).string(); }
  std::string shard(int64_t step) const { return dir(step) + "/rank-00000.safetensors"; }

  // A checkpoint of one tensor, model.norm.weight = {1, 2}, in one slice of
  // one shard (with both moments), listed with its size and checksums.
  void add(int64_t step) const {
    fs::create_directories(dir(step));
    const std::vector<float> p = {1, 2}, m = {3, 4}, v = {5, 6};
    const std::string t = "model.norm.weight";
    write_safetensors(
        shard(step),
        {{t, {2}, p.data()}, {t + ".exp_avg", {2}, m.data()}, {t + ".exp_avg_sq", {2}, v.data()}});
    const std::string file = read_file(shard(step));
    uint64_t header = 0;
    std::memcpy(&header, file.data(), 8);
    auto crc = [](const std::vector<float>& x) { return crc_hex(crc32c(x.data(), 4 * x.size())); };
    nlohmann::json meta = {
        {"format_version", kCheckpointFormatVersion},
        {"states", {"", ".exp_avg", ".exp_avg_sq"}},
        {"step", step},
        {"tensors", {{t, {{"shape", {2}}, {"dtype", "F32"}}}}},
        {"files",
         {{{"name", "rank-00000.safetensors"},
           {"bytes", file.size()},
           {"header_crc32c", crc_hex(crc32c(file.data(), 8 + header))},
           {"slices",
            {{{"tensor", t}, {"offsets", {0}}, {"shape", {2}}, {"crc32c", {crc(p), crc(m), crc(v)}}}}}}}}};
    meta["metadata_crc32c"] = metadata_checksum(meta);
    write_file_atomic(dir(step) + "/metadata.json", meta.dump(1));
  }
  void set_latest(const std::string& name) const { write_file_atomic(str() + "/latest", name + "\n"); }

 private:
  fs::path path_;
};

TEST(ResolveResume, LatestIsTheAuthority) {
  Root r;
  r.add(2);
  r.add(4);
  r.add(6);  // newer than `latest`: a save cut between its rename and the pointer's update
  r.set_latest("step-00000004");
  const ResumeChoice c = resolve_resume("auto", r.str());
  EXPECT_EQ(c.dir, r.dir(4));
  EXPECT_TRUE(c.warnings.empty());
  fs::remove(r.str() + "/latest");  // no pointer: the highest step
  EXPECT_EQ(resolve_resume("auto", r.str()).dir, r.dir(6));
}

// Flips the last byte of a file (the last tensor's data).
void flip_last_byte(const std::string& path) {
  std::string bytes = read_file(path);
  bytes.back() = static_cast<char>(bytes.back() ^ 0x55);
  write_file_atomic(path, bytes);
}

TEST(ResolveResume, FallsBackPastATruncatedCheckpointWithAWarning) {
  Root r;
  r.add(2);
  r.add(4);
  r.set_latest("step-00000004");
  const size_t bytes = fs::file_size(r.shard(4));
  write_file_atomic(r.shard(4), read_file(r.shard(4)).substr(0, 3));
  ResumeChoice c = resolve_resume("auto", r.str());
  EXPECT_EQ(c.dir, r.dir(2));
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0], HasSubstr("checkpoint " + r.dir(4) + " is not usable"));
  EXPECT_THAT(c.warnings[0],
              HasSubstr("has 3 bytes but metadata.json says " + std::to_string(bytes) + " (truncated)"));
  EXPECT_THAT(c.warnings[0], HasSubstr("model.norm.weight"));
  EXPECT_THAT(c.warnings[0], HasSubstr("falling back to the previous complete checkpoint"));
  // A fallback's own resolution: only older checkpoints, and "starting fresh" when none is left.
  c = resolve_resume("auto", r.str(), 2);
  EXPECT_EQ(c.dir, "");
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0], HasSubstr("starting fresh"));
}

// A metadata.json whose slices leave a hole (resealed: the hole, not the
// checksum, is what is found) is passed over at start-up, before any load.
TEST(ResolveResume, FallsBackPastAHole) {
  Root r;
  r.add(2);
  r.add(4);
  nlohmann::json meta = nlohmann::json::parse(read_file(r.dir(4) + "/metadata.json"));
  meta["files"][0]["slices"][0]["shape"] = {1};
  meta["metadata_crc32c"] = metadata_checksum(meta);
  write_file_atomic(r.dir(4) + "/metadata.json", meta.dump(1));
  const ResumeChoice c = resolve_resume("auto", r.str());
  EXPECT_EQ(c.dir, r.dir(2));
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0], HasSubstr("the saved slices of 'model.norm.weight' cover 1 of its 2 elements "
                                       "(metadata.json leaves a hole)"));
}

// A flipped data byte is not resolve_resume's to find (it reads no shard
// file): the ranks that read the slice find it (open_resume, CheckpointReader).
TEST(ResolveResume, SliceChecksumsAreTheReadersCheck) {
  Root r;
  r.add(4);
  flip_last_byte(r.shard(4));
  const ResumeChoice c = resolve_resume("auto", r.str());
  EXPECT_EQ(c.dir, r.dir(4));
  CheckpointReader reader(c.dir);
  reader.verify_box("model.norm.weight", "", {0}, {2});  // the parameters are intact
  try {
    reader.verify_box("model.norm.weight", ".exp_avg_sq", {0}, {1});
    ADD_FAILURE() << "a corrupt slice was accepted";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(r.shard(4) + ": CRC32C mismatch in 'model.norm.weight.exp_avg_sq'"));
  }
}

TEST(ResolveResume, ALatestNamingNoFolderIsIgnored) {
  Root r;
  r.add(2);
  r.add(4);
  r.set_latest("step-00000008");
  const ResumeChoice c = resolve_resume("auto", r.str());
  EXPECT_EQ(c.dir, r.dir(4));
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0],
              HasSubstr("names 'step-00000008', which is not a checkpoint folder there; ignored"));
}

TEST(ResolveResume, NoUsableCheckpointStartsFreshWithWarnings) {
  Root r;
  r.add(1);
  r.add(2);
  r.add(3);
  r.add(4);
  r.add(5);
  fs::remove(r.dir(1) + "/metadata.json");                                // a folder that is not a checkpoint
  write_file_atomic(r.dir(2) + "/metadata.json", std::string_view("{"));  // not JSON
  write_file_atomic(r.dir(3) + "/metadata.json", std::string_view(R"({"format_version": 99})"));
  nlohmann::json bad_list = {{"format_version", kCheckpointFormatVersion}, {"files", 3}};
  bad_list["metadata_crc32c"] = metadata_checksum(bad_list);
  write_file_atomic(r.dir(4) + "/metadata.json", bad_list.dump());
  fs::remove(r.shard(5));
  r.add(6);
  // A changed digit leaves valid JSON (step 6 → 7): only metadata.json's own checksum sees it.
  std::string text = read_file(r.dir(6) + "/metadata.json");
  text.replace(text.find("\"step\": 6"), 9, "\"step\": 7");
  write_file_atomic(r.dir(6) + "/metadata.json", text);
  ResumeChoice c = resolve_resume("auto", r.str());
  EXPECT_EQ(c.dir, "");
  ASSERT_EQ(c.warnings.size(), 7u);
  EXPECT_THAT(c.warnings[0], HasSubstr("its own checksum (metadata_crc32c"));
  c.warnings.erase(c.warnings.begin());
  EXPECT_THAT(c.warnings[0], HasSubstr("rank-00000.safetensors is missing"));
  EXPECT_THAT(c.warnings[1], HasSubstr("the list of files is malformed"));
  EXPECT_THAT(c.warnings[2], HasSubstr("format_version 99"));
  EXPECT_THAT(c.warnings[3], HasSubstr("not valid JSON"));
  EXPECT_THAT(c.warnings[4], HasSubstr("metadata.json is missing"));
  EXPECT_THAT(c.warnings[5], HasSubstr("no usable checkpoint in " + r.str() + "; starting fresh"));
}

TEST(ResolveResume, NothingThereStartsFreshSilently) {
  Root r;
  fs::create_directories(r.dir(3) + ".tmp-77");  // a save that never committed
  const ResumeChoice c = resolve_resume("auto", r.str());
  EXPECT_EQ(c.dir, "");
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(resolve_resume("", r.str()).dir, "");
  EXPECT_THROW(resolve_resume("auto", ""), ConfigError);
}

TEST(ResolveResume, AnExplicitDamagedCheckpointIsAnError) {
  Root r;
  r.add(2);
  EXPECT_EQ(resolve_resume(r.dir(2), "").dir, r.dir(2));
  fs::remove(r.shard(2));
  try {
    resolve_resume(r.dir(2), "");
    ADD_FAILURE() << "a damaged checkpoint was accepted";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr(r.shard(2) + " is missing"));
  }
  EXPECT_THROW(resolve_resume(r.dir(7), ""), ConfigError);  // no such checkpoint
}

}  // namespace
}  // namespace mt

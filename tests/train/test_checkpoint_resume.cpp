// Which checkpoint --resume picks (ckpt/checkpoint.h resolve_resume) on
// hand-made checkpoint folders: `latest` is the authority, a damaged one is
// passed over with a warning that names it and says why, the next older one
// is taken, and with none usable the run starts fresh; --resume PATH to a
// damaged checkpoint is an error. resolve_resume reads no shard file: a
// slice's checksum is checked by the rank that reads it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_meta.h"
#include "ckpt/checkpoint_read.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file.h"
#include "formats/safetensors.h"

namespace mt {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

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
        {"bad_steps", 0},
        {"adam_steps", step},
        {"config", nlohmann::json::object()},
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
  EXPECT_THAT(
      c.warnings[0],
      HasSubstr("names 'step-00000008', which is not a checkpoint folder there; taking an older one"));
}

// `latest` naming a missing step leaves only the older ones: a newer folder is
// a superseded run's. step-00000000 (a rollback to a fresh start) names none.
TEST(ResolveResume, ALatestNamingAMissingStepTakesAnOlderOne) {
  Root r;
  r.add(2);
  r.add(6);
  r.set_latest("step-00000004");
  ResumeChoice c = resolve_resume("auto", r.str());
  EXPECT_EQ(c.dir, r.dir(2));
  ASSERT_EQ(c.warnings.size(), 1u);
  r.set_latest("step-00000000");
  c = resolve_resume("auto", r.str());
  EXPECT_EQ(c.dir, "");
  EXPECT_TRUE(c.warnings.empty());
}

std::vector<int64_t> steps_in(const Root& r) {
  return checkpoint_steps(r.str());
}

// Pruning goes by commit order: the committed step always stays, steps newer
// than it (superseded) go, and `keep` counts the committed one.
TEST(Prune, NeverDeletesTheCommitAndRemovesSupersededSteps) {
  for (const int64_t keep : {0, 1, 2, 3}) {
    SCOPED_TRACE("keep " + std::to_string(keep));
    Root r;
    for (const int64_t s : {2, 4, 6, 8, 10})
      r.add(s);
    fs::create_directories(r.dir(7) + ".tmp-1");
    prune_checkpoints(r.str(), 6, keep);
    std::vector<int64_t> want = {2, 4, 6};
    if (keep > 0) want.erase(want.begin(), want.end() - keep);
    EXPECT_EQ(steps_in(r), want);
    EXPECT_FALSE(fs::exists(r.dir(7) + ".tmp-1"));
  }
}

TEST(Prune, ARollbackSupersedesTheNewerStepsByName) {
  Root r;
  for (const int64_t s : {2, 4, 6, 8})
    r.add(s);
  r.set_latest("step-00000008");
  EXPECT_EQ(supersede_newer(r.str(), 8), "");
  const std::string note = supersede_newer(r.str(), 4);
  EXPECT_THAT(note, HasSubstr("the newer checkpoint(s) step-00000006, step-00000008 in " + r.str() +
                              " are superseded"));
  EXPECT_EQ(read_file(r.str() + "/latest"), "step-00000004\n");
  EXPECT_EQ(resolve_resume("auto", r.str()).dir, r.dir(4));    // never the superseded step-8
  EXPECT_EQ(steps_in(r), (std::vector<int64_t>{2, 4, 6, 8}));  // removed by the next commit's prune
  EXPECT_NO_THROW(check_fresh_start(r.str(), "auto"));
  try {
    check_fresh_start(r.str(), "");
    ADD_FAILURE() << "a fresh run into a directory of checkpoints was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("already holds checkpoints (step-00000002, step-00000004, step-00000006, "
                                    "step-00000008)"));
  }
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
  nlohmann::json bad_list = {{"format_version", kCheckpointFormatVersion},
                             {"files", 3},
                             {"step", 4},
                             {"bad_steps", 0},
                             {"adam_steps", 0},
                             {"config", nlohmann::json::object()},
                             {"tensors", nlohmann::json::object()}};
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

// metadata.json edited and resealed (its metadata_crc32c recomputed, so the
// checksum vouches for the edit): `edit` changes the parsed document.
template <class F>
void forge(const std::string& dir, F&& edit) {
  nlohmann::json meta = nlohmann::json::parse(read_file(dir + "/metadata.json"));
  edit(meta);
  meta["metadata_crc32c"] = metadata_checksum(meta);
  write_file_atomic(dir + "/metadata.json", meta.dump(1));
}

// Fields a valid checksum cannot vouch for are checked by name: each forged
// checkpoint is passed over by --resume auto with a warning naming it, the
// field and the rule, and refused as --resume PATH.
TEST(ResolveResume, ForgedFieldsWithValidChecksumsAreRefusedByName) {
  const struct {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* message;
  } cases[] = {
      {"adam_steps -3", [](nlohmann::json& m) { m["adam_steps"] = -3; },
       "metadata.json's adam_steps (-3) must lie in [0, step]"},
      {"adam_steps past the step", [](nlohmann::json& m) { m["adam_steps"] = 9; },
       "metadata.json's adam_steps (9) must lie in [0, step]"},
      {"step -5", [](nlohmann::json& m) { m["step"] = -5; }, "metadata.json's step (-5) must be at least 0"},
      {"step 4 in step-8/", [](nlohmann::json& m) { m["step"] = 4; },
       "metadata.json's step (4) is not the step its folder is named after (8)"},
      {"step a string", [](nlohmann::json& m) { m["step"] = "8"; },
       "metadata.json's step (\"8\") is not an integer"},
      {"bad_steps -1", [](nlohmann::json& m) { m["bad_steps"] = -1; }, "metadata.json's bad_steps (-1)"},
      {"no config", [](nlohmann::json& m) { m.erase("config"); }, "metadata.json has no \"config\" object"},
      {"a config value not a string", [](nlohmann::json& m) { m["config"]["train.lr"] = 3; },
       "metadata.json's config has train.lr = 3, not a string"},
      {"no tensors", [](nlohmann::json& m) { m.erase("tensors"); },
       "metadata.json has no \"tensors\" object"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    Root r;
    r.add(2);
    r.add(8);
    r.set_latest("step-00000008");
    forge(r.dir(8), c.edit);
    const ResumeChoice choice = resolve_resume("auto", r.str());
    EXPECT_EQ(choice.dir, r.dir(2));
    ASSERT_EQ(choice.warnings.size(), 1u);
    EXPECT_THAT(choice.warnings[0], HasSubstr("checkpoint " + r.dir(8) + " is not usable"));
    EXPECT_THAT(choice.warnings[0], HasSubstr(c.message));
    try {
      resolve_resume(r.dir(8), "");
      ADD_FAILURE() << "a forged checkpoint was accepted";
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr("checkpoint " + r.dir(8) + ": " + c.message));
    }
  }
}

// A `latest` or metadata.json that is a device or a FIFO is refused at once
// (never read until memory runs out, never waited on); a shard that is not a
// regular file is named as such, not as "18446744073709551615 bytes".
TEST(ResolveResume, NonRegularFilesArePassedOverByName) {
  Root r;
  r.add(2);
  r.add(4);
  fs::create_symlink("/dev/zero", r.str() + "/latest");
  ResumeChoice c = resolve_resume("auto", r.str());
  EXPECT_EQ(c.dir, r.dir(4));
  ASSERT_EQ(c.warnings.size(), 1u);
  EXPECT_THAT(c.warnings[0], HasSubstr("is not a regular file (a character device)"));
  fs::remove(r.dir(4) + "/metadata.json");
  ASSERT_EQ(::mkfifo((r.dir(4) + "/metadata.json").c_str(), 0600), 0);
  fs::remove(r.shard(2));
  fs::create_directories(r.shard(2));
  c = resolve_resume("auto", r.str());
  EXPECT_EQ(c.dir, "");
  ASSERT_EQ(c.warnings.size(), 4u);
  EXPECT_THAT(c.warnings[1],
              HasSubstr("metadata.json '" + r.dir(4) + "/metadata.json' is not a regular file (a FIFO)"));
  EXPECT_THAT(c.warnings[2], HasSubstr(r.shard(2) + "' is not a regular file (a directory)"));
  EXPECT_THAT(c.warnings[2], Not(HasSubstr("18446744073709551615")));
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

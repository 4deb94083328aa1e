// Checkpoints and input files beyond byte mutations: every reader given a
// device, a FIFO or a directory in place of its file refuses it with an
// IoError naming the path (a hang is the ctest timeout); seeded forgeries of
// metadata.json's fields, resealed with a valid metadata_crc32c, are refused
// with one of meshtrain's errors or accepted only when the fields a resume
// takes hold what a save can write, never an internal error;
// and a second holder of a checkpoint directory's lock is refused by name,
// from this process and from another.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_meta.h"
#include "ckpt/checkpoint_read.h"
#include "config/config.h"
#include "core/crc32c.h"
#include "core/dir_lock.h"
#include "core/error.h"
#include "core/file.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"
#include "fuzz/mutate.h"

namespace mt {
namespace {

namespace fs = std::filesystem;

// What stands in for a file: the path of each kind of non-regular file.
std::vector<std::string> non_regular_files(const std::string& dir) {
  fs::create_directories(dir + "/a_directory");
  const std::string fifo = dir + "/a_fifo";
  if (!fs::exists(fifo)) {
    EXPECT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  }
  const std::string link = dir + "/zero_link";
  if (!fs::is_symlink(link)) fs::create_symlink("/dev/zero", link);
  return {"/dev/zero", "/dev/urandom", fifo, dir + "/a_directory", link};
}

TEST(FuzzFiles, EveryReaderRefusesNonRegularFiles) {
  const std::string dir = fs::path(fuzz::scratch("fuzz_nonregular", "x")).parent_path().string();
  const std::vector<std::pair<const char*, std::function<void(const std::string&)>>> readers = {
      {"read_file", [](const std::string& p) { read_file(p, kMaxConfigFile, "file"); }},
      {"config", [](const std::string& p) { load_config(p, {}); }},
      {"config.json", [](const std::string& p) { read_hf_config(p); }},
      {"safetensors", [](const std::string& p) { SafetensorsFile::open(p); }},
      {"token file", [](const std::string& p) { TokenFile::open(p); }},
      {"tokenizer", [](const std::string& p) { Tokenizer::load(p); }},
      {"metadata.json", [](const std::string& p) {
         const std::string ck = fs::path(p).parent_path().string() + "/ck";
         fs::create_directories(ck);
         fs::remove(ck + "/metadata.json");
         fs::create_symlink(fs::absolute(p), ck + "/metadata.json");
         read_metadata(ck);
       }}};
  for (const std::string& path : non_regular_files(dir)) {
    for (const auto& [name, read] : readers) {
      try {
        read(path);
        ADD_FAILURE() << name << " accepted " << path;
      } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos)
            << name << " on " << path << ": " << e.what();
      }
    }
  }
  fs::remove_all(dir);
}

// A checkpoint of one tensor t = [3, 2] in one slice, sealed as a save seals it.
std::string make_checkpoint(const std::string& root, int64_t step) {
  const std::string dir = root + "/" + checkpoint_name(step);
  fs::create_directories(dir);
  const std::vector<float> p = {1, 2, 3, 4, 5, 6}, m(6, 0.5f), v(6, 0.25f);
  write_safetensors(
      dir + "/rank-00000.safetensors",
      {{"t", {3, 2}, p.data()}, {"t.exp_avg", {3, 2}, m.data()}, {"t.exp_avg_sq", {3, 2}, v.data()}});
  const std::string file = read_file(dir + "/rank-00000.safetensors");
  const SafetensorsFile f = SafetensorsFile::open(dir + "/rank-00000.safetensors");
  auto crc = [](const std::vector<float>& x) { return crc_hex(crc32c(x.data(), 4 * x.size())); };
  nlohmann::json meta = {{"format_version", kCheckpointFormatVersion},
                         {"step", step},
                         {"bad_steps", 0},
                         {"adam_steps", step},
                         {"seed", 1},
                         {"states", {"", ".exp_avg", ".exp_avg_sq"}},
                         {"config", {{"train.lr", "0.01"}, {"model.vocab_size", "3"}}},
                         {"tensors", {{"t", {{"shape", {3, 2}}, {"dtype", "F32"}}}}},
                         {"files",
                          {{{"name", "rank-00000.safetensors"},
                            {"bytes", file.size()},
                            {"header_crc32c", crc_hex(crc32c(f.header_bytes()))},
                            {"slices",
                             {{{"tensor", "t"},
                               {"offsets", {0, 0}},
                               {"shape", {3, 2}},
                               {"crc32c", {crc(p), crc(m), crc(v)}}}}}}}}};
  meta["metadata_crc32c"] = metadata_checksum(meta);
  write_file_atomic(dir + "/metadata.json", meta.dump(1));
  return dir;
}

// A value a forger might write in place of a field's.
nlohmann::json forged_value(std::mt19937_64& rng) {
  switch (rng() % 9) {
    case 0:
      return -static_cast<int64_t>(rng() % 10) - 1;
    case 1:
      return static_cast<int64_t>(rng() % 20);
    case 2:
      return std::numeric_limits<int64_t>::max() - static_cast<int64_t>(rng() % 3);
    case 3:
      return std::to_string(rng() % 10);
    case 4:
      return nullptr;
    case 5:
      return nlohmann::json::array({static_cast<int64_t>(rng() % 4), -1});
    case 6:
      return nlohmann::json::object();
    case 7:
      return 1.5;
    default:
      return static_cast<int64_t>(1) << (rng() % 63);
  }
}

// Seeded forgeries: one field replaced or deleted (top-level fields, config
// keys, a tensor's or a slice's shape), metadata_crc32c recomputed. Each is
// refused by resolve_resume and the reader with a meshtrain error (never a
// JSON or allocation error), or accepted, read, and then its step, step
// counts and config are what a save of step 8 writes.
TEST(FuzzFiles, ForgedMetadataFieldsWithValidChecksums) {
  const std::string root = fs::path(fuzz::scratch("fuzz_forged", "x")).parent_path().string();
  std::mt19937_64 rng(fuzz::seed());
  const std::vector<std::vector<std::string>> fields = {{"step"},
                                                        {"bad_steps"},
                                                        {"adam_steps"},
                                                        {"states"},
                                                        {"config"},
                                                        {"tensors"},
                                                        {"files"},
                                                        {"config", "train.lr"},
                                                        {"config", "model.vocab_size"},
                                                        {"tensors", "t", "shape"},
                                                        {"files", "0", "slices", "0", "shape"},
                                                        {"files", "0", "slices", "0", "offsets"},
                                                        {"files", "0", "bytes"}};
  const int n = fuzz::iterations(300);
  int refused = 0;
  fs::remove_all(root);
  const std::string dir = make_checkpoint(root, 8);
  const std::string original = read_file(dir + "/metadata.json");
  for (int it = 0; it < n; ++it) {
    nlohmann::json meta = nlohmann::json::parse(original);
    const std::vector<std::string>& path = fields[rng() % fields.size()];
    nlohmann::json* at = &meta;
    for (size_t i = 0; i + 1 < path.size(); ++i)
      at = at->is_array() ? &(*at)[std::stoul(path[i])] : &(*at)[path[i]];
    const bool erase = rng() % 4 == 0;
    if (erase && at->is_object())
      at->erase(path.back());
    else if (at->is_array())
      (*at)[std::stoul(path.back())] = forged_value(rng);
    else
      (*at)[path.back()] = forged_value(rng);
    meta["metadata_crc32c"] = metadata_checksum(meta);
    fuzz::spit(dir + "/metadata.json", meta.dump(1));  // no fsync: only this test reads it
    const std::string what = "iteration " + std::to_string(it) + ": " + meta.dump();
    try {
      resolve_resume(dir, "");
      CheckpointReader reader(dir);
      reader.verify_all();
      std::vector<float> box(6);
      reader.read_box("t", "", {0, 0}, {3, 2}, box.data());
      // Accepted: the fields a resume takes hold what a save of step 8 can write.
      const nlohmann::json& got = reader.metadata();
      auto in_range = [&](const char* key) {
        return got.contains(key) && got[key].is_number_integer() && got[key].get<int64_t>() >= 0 &&
               got[key].get<int64_t>() <= 8;
      };
      EXPECT_TRUE(got.contains("step") && got["step"] == 8) << what;
      EXPECT_TRUE(in_range("adam_steps") && in_range("bad_steps")) << what;
      EXPECT_TRUE(got.contains("config") && got["config"].is_object()) << what;
      if (got.contains("config") && got["config"].is_object()) {
        for (const auto& [key, value] : got["config"].items()) {
          EXPECT_TRUE(value.is_string()) << what;
        }
      }
    } catch (const Error&) {
      ++refused;  // refused with one of meshtrain's errors
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": " << e.what();
    }
  }
  EXPECT_GT(refused, 0);
  fs::remove_all(root);
}

// Runs f in a child process; its exit status (0: f returned, 1: it threw IoError).
template <class F>
int in_child(F&& f) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    try {
      f();
      ::_exit(0);
    } catch (const IoError&) {
      ::_exit(1);
    } catch (...) {
      ::_exit(2);
    }
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 3;
}

TEST(FuzzFiles, ASecondRunIntoALockedDirectoryIsRefused) {
  const std::string dir = fs::path(fuzz::scratch("fuzz_lock", "x")).parent_path().string();
  fs::create_directories(dir);
  {
    const DirLock first(dir);
    for (int i = 0; i < 3; ++i) {
      try {
        const DirLock second(dir);
        ADD_FAILURE() << "a second lock on " << dir << " was granted";
      } catch (const IoError& e) {
        EXPECT_NE(std::string(e.what()).find("is locked by pid " + std::to_string(::getpid())),
                  std::string::npos)
            << e.what();
      }
    }
    EXPECT_EQ(in_child([&] { const DirLock other(dir); }), 1) << "another process took a held lock";
  }
  EXPECT_EQ(in_child([&] { const DirLock other(dir); }), 0) << "a released lock was refused";
  // A holder that dies without releasing (its _exit skips the destructor) leaves its record, not its lock.
  EXPECT_EQ(in_child([&] {
              new DirLock(dir);  // never destroyed
              ::_exit(0);
            }),
            0);
  EXPECT_NE(read_file(dir + "/.lock").find("pid "), std::string::npos);
  const DirLock after(dir);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mt

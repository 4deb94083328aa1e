// Which checkpoint a run resumes from, and whether its files are intact
// (ckpt/checkpoint.h; the rule: docs/FORMATS.md, "Training checkpoints").
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_meta.h"
#include "ckpt/checkpoint_read.h"
#include "comm/group.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file.h"

namespace mt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct FileEntry {
  std::string name, crc;  // crc: of a file without slices (metrics.jsonl), checked whole
  size_t bytes = 0;
  std::vector<std::string> tensors;  // whose slices it holds
};

// metadata.json's "files"; DataError naming metadata.json when the list is
// malformed or names a file outside the checkpoint's folder.
std::vector<FileEntry> listed_files(const std::string& dir, const json& meta) {
  const std::string meta_path = (fs::path(dir) / "metadata.json").string();
  std::vector<FileEntry> out;
  try {
    for (const json& f : meta.at("files")) {
      FileEntry e{f.at("name").get<std::string>(), "", f.at("bytes").get<size_t>(), {}};
      for (const json& s : f.value("slices", json::array()))
        e.tensors.push_back(s.at("tensor").get<std::string>());
      if (!f.contains("slices")) e.crc = f.at("crc32c").get<std::string>();  // a shard file's are per slice
      MT_REQUIRE(!e.name.empty() && e.name.find('/') == std::string::npos && e.name != "..", DataError,
                 meta_path, ": file name '", e.name, "' is not a plain file name in the checkpoint's folder");
      out.push_back(std::move(e));
    }
  } catch (const json::exception& e) {
    MT_THROW(DataError, meta_path, ": the list of files is malformed (", e.what(), ")");
  }
  return out;
}

// " (it holds slices of a, b, c and 4 more tensors)", or "" for a file of no tensor.
std::string held(const FileEntry& f) {
  if (f.tensors.empty()) return "";
  std::string out = " (it holds slices of ";
  const size_t shown = std::min<size_t>(f.tensors.size(), 3);
  for (size_t i = 0; i < shown; ++i)
    out += (i ? ", " : "") + f.tensors[i];
  if (shown < f.tensors.size()) out += " and " + std::to_string(f.tensors.size() - shown) + " more tensors";
  return out + ")";
}

// Why `dir` cannot be resumed from (verify_checkpoint's message), or "".
std::string defect_of(const std::string& dir) {
  try {
    verify_checkpoint(dir);
    return "";
  } catch (const Error& e) {  // DataError for the checks, IoError for a file that cannot be read
    return e.what();
  }
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\r'))
    s.pop_back();
  return s;
}

// --resume auto's candidates, newest first: the checkpoint `latest` names, then
// every step-N/ older than it. A step-N/ newer than `latest`'s is a save cut
// between its rename and the pointer's update, or one of a run that a later
// run rolled back (supersede_newer); `latest` is the authority, so it is
// passed over. A `latest` that names a step-N/ not there (step-00000000: none
// yet) leaves the older ones, with a warning for a missing one; one that names
// no checkpoint at all is ignored, with a warning.
std::vector<int64_t> auto_candidates(const std::string& root, std::vector<std::string>& warnings) {
  std::vector<int64_t> steps = checkpoint_steps(root);
  std::reverse(steps.begin(), steps.end());
  std::error_code ec;
  const fs::path latest = fs::path(root) / "latest";
  if (!fs::exists(latest, ec) && !fs::is_symlink(latest, ec)) return steps;
  std::string name;
  try {
    name = trimmed(read_file(latest.string(), kMaxPointerFile, "checkpoint pointer"));
  } catch (const IoError& e) {
    warnings.push_back(std::string("--resume auto: ") + e.what() + "; ignored");
    return steps;
  }
  const int64_t named = checkpoint_step(name);
  if (named < 0) {
    warnings.push_back("--resume auto: " + latest.string() + " names '" + name +
                       "', which is not a checkpoint name; ignored");
    return steps;
  }
  if (named > 0 && std::find(steps.begin(), steps.end(), named) == steps.end())
    warnings.push_back("--resume auto: " + latest.string() + " names '" + name +
                       "', which is not a checkpoint folder there; taking an older one");
  steps.erase(std::remove_if(steps.begin(), steps.end(), [&](int64_t s) { return s > named; }), steps.end());
  return steps;
}

}  // namespace

void verify_checkpoint(const std::string& dir) {
  const json meta = read_metadata(dir);
  for (const FileEntry& f : listed_files(dir, meta)) {
    const std::string path = (fs::path(dir) / f.name).string();
    std::error_code ec;
    MT_REQUIRE(fs::exists(path, ec), DataError, "checkpoint file ", path, " is missing", held(f));
    checked_file_size(path, f.bytes, held(f));
    if (!f.tensors.empty()) continue;  // a shard file: its slices are checked by the ranks that read them
    const std::string crc = crc_hex(crc32c(read_file(path, kMaxTextFile, "checkpoint file")));
    MT_REQUIRE(crc == f.crc, DataError, "checkpoint file ", path, ": CRC32C mismatch (", crc,
               ", metadata.json says ", f.crc, "): the file is corrupt");
  }
  // Every tensor tiled by its slices, each with its checksums; reads no shard file.
  const CheckpointReader geometry(dir);
}

ResumeChoice resolve_resume(const std::string& resume, const std::string& checkpoint_dir,
                            int64_t older_than) {
  if (resume.empty()) return {};
  if (resume != "auto") {
    MT_REQUIRE(fs::exists(fs::path(resume) / "metadata.json"), ConfigError, "--resume ", resume,
               ": no metadata.json there (not a complete checkpoint)");
    verify_checkpoint(resume);
    return {resume, {}};
  }
  MT_REQUIRE(!checkpoint_dir.empty(), ConfigError,
             "--resume auto looks in train.checkpoint_dir, which is not set");
  ResumeChoice out;
  std::vector<int64_t> steps = auto_candidates(checkpoint_dir, out.warnings);
  if (older_than >= 0) {  // a fallback: the first call gave the warnings about `latest`
    out.warnings.clear();
    steps.erase(std::remove_if(steps.begin(), steps.end(), [&](int64_t s) { return s >= older_than; }),
                steps.end());
  }
  for (const int64_t step : steps) {
    const std::string dir = (fs::path(checkpoint_dir) / checkpoint_name(step)).string();
    const std::string why = defect_of(dir);
    if (why.empty()) {
      out.dir = dir;
      return out;
    }
    out.warnings.push_back("--resume auto: checkpoint " + dir + " is not usable: " + why +
                           "; falling back to the previous complete checkpoint");
  }
  if (!out.warnings.empty() || older_than >= 0)
    out.warnings.push_back("--resume auto: no usable checkpoint in " + checkpoint_dir + "; starting fresh");
  return out;
}

void require_same_resume(const std::string& dir, int rank, const Group* world) {
  if (world == nullptr) return;
  // A hash of the path: equal on every rank exactly when the largest and the
  // smallest (the largest of the negated) agree.
  int64_t h[2] = {static_cast<int64_t>(crc32c(dir)), -static_cast<int64_t>(crc32c(dir))};
  Group g = *world;
  g.all_reduce(h, 2, "resume: the same checkpoint on every rank", ReduceOp::max);
  MT_REQUIRE(h[0] == -h[1], Error, "rank ", rank, " resumes from '", dir,
             "' but another rank chose a different checkpoint: the ranks see different files under "
             "train.checkpoint_dir (it must be one shared directory)");
}

}  // namespace mt

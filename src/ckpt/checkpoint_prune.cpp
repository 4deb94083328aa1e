// Which checkpoints of a checkpoint_dir belong to the run writing it, and
// which go (ckpt/checkpoint.h; the rule: docs/FORMATS.md, "Training
// checkpoints", "Pruning and rollbacks").
#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_meta.h"
#include "core/atomic_dir.h"
#include "core/error.h"
#include "core/file.h"

namespace mt {

namespace fs = std::filesystem;

std::vector<int64_t> checkpoint_steps(const std::string& root) {
  std::vector<int64_t> steps;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const int64_t step = checkpoint_step(e.path().filename().string());
    if (step >= 0 && e.is_directory(ec)) steps.push_back(step);
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

namespace {
std::string names_of(const std::vector<int64_t>& steps) {
  std::string out;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (i == 3 && steps.size() > 4) return out + " and " + std::to_string(steps.size() - 3) + " more";
    out += (i ? ", " : "") + checkpoint_name(steps[i]);
  }
  return out;
}
}  // namespace

void check_fresh_start(const std::string& root, const std::string& resume) {
  if (root.empty() || !resume.empty()) return;
  const std::vector<int64_t> steps = checkpoint_steps(root);
  MT_REQUIRE(steps.empty(), ConfigError, "train.checkpoint_dir '", root, "' already holds checkpoints (",
             names_of(steps),
             ") and this run starts fresh: continue them with --resume auto, roll back with --resume ", root,
             "/step-N (the newer ones are then superseded), or choose an empty directory");
}

std::string supersede_newer(const std::string& root, int64_t step) {
  if (root.empty()) return "";
  std::vector<int64_t> newer = checkpoint_steps(root);
  newer.erase(newer.begin(), std::upper_bound(newer.begin(), newer.end(), step));
  if (newer.empty()) return "";
  // `latest` names the resumed step (step-00000000: none yet), so that --resume
  // auto passes over the newer ones from now on, even if this run dies before
  // its first checkpoint; that checkpoint's prune removes them.
  write_file_atomic((fs::path(root) / "latest").string(), checkpoint_name(step) + "\n");
  return "rolling back to step " + std::to_string(step) + ": the newer checkpoint(s) " + names_of(newer) +
         " in " + root + " are superseded (`latest` now names " + checkpoint_name(step) +
         "; they are removed when this run commits its first checkpoint)";
}

void prune_checkpoints(const std::string& root, int64_t committed, int64_t keep) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find(".tmp-") != std::string::npos)
      fs::remove_all(e.path(), ec);  // a save that never committed (the lock: no other run writes here)
  }
  std::vector<int64_t> older;
  for (const int64_t step : checkpoint_steps(root)) {
    if (step < committed)
      older.push_back(step);
    else if (step > committed)  // superseded: a rolled-back run's, newer than `latest`
      remove_dir_whole((fs::path(root) / checkpoint_name(step)).string(), ".tmp-removed");
  }
  // `committed` is one of the `keep` kept; the rest are the newest older ones.
  for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep - 1) < older.size(); ++i)
    remove_dir_whole((fs::path(root) / checkpoint_name(older[i])).string(),
                     ".tmp-removed");  // never half there
}

}  // namespace mt

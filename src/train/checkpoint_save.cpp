// Writing a checkpoint (train/checkpoint.h; format: docs/FORMATS.md).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/atomic_dir.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/fault_point.h"
#include "core/file.h"
#include "train/checkpoint.h"
#include "train/checkpoint_meta.h"
#include "train/checkpoint_slices.h"

namespace mt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Writes this rank's slices into `dir`; returns its entry of metadata.json's
// "files" (empty when it owns no slice).
json write_rank_file(const std::string& dir, const TrainModel& model, const RunMesh& mesh) {
  const MeshSizes sizes = run_sizes(mesh);
  const MeshCoords coords = run_coords(mesh);
  std::vector<std::vector<float>> boxes;  // kept alive until the file is written
  std::vector<TensorRef> refs;
  json slices = json::array();
  for (size_t c = 0; c < model.chunks.size(); ++c) {
    ParamStore& store = model.chunks[c]->store();
    const float* sources[3] = {store.local_params(), model.optims[c]->m().data(),
                               model.optims[c]->v().data()};
    for (const LocalSlice& s : local_slices(*model.chunks[c], sizes, coords)) {
      if (!s.writer) continue;
      for (int k = 0; k < 3; ++k) {
        boxes.emplace_back(static_cast<size_t>(s.numel()));
        slice_to_box(s, sources[k], boxes.back().data());
        refs.push_back({s.tensor + kStateSuffix[k], s.size, boxes.back().data()});
      }
      slices.push_back({{"tensor", s.tensor}, {"offsets", s.offsets}, {"shape", s.size}});
    }
  }
  if (refs.empty()) return json();
  const std::string name = slice_file_name(mesh.rank);
  const std::string path = (fs::path(dir) / name).string();
  write_safetensors(path, refs, {{"format", "pt"}});  // flushed to disk, then renamed in
  const std::string bytes = read_file(path);
  return {{"name", name}, {"bytes", bytes.size()}, {"crc32c", crc_hex(crc32c(bytes))}, {"slices", slices}};
}

// Every rank's file entry on rank 0 (the others get theirs back only).
std::vector<json> gather_entries(const json& mine, const RunMesh& mesh) {
  if (mesh.world() == nullptr) return {mine};
  Group& world = *mesh.world();
  const std::string text = mine.dump();
  int64_t len = static_cast<int64_t>(text.size());
  world.all_reduce(&len, 1, ElemType::i64, ReduceOp::max, "checkpoint: metadata length");
  const int64_t words = len / 8 + 1;
  std::vector<int64_t> send(static_cast<size_t>(words), 0), recv(static_cast<size_t>(words * world.size()));
  std::copy(text.begin(), text.end(), reinterpret_cast<char*>(send.data()));
  world.all_gather(send.data(), recv.data(), words, ElemType::i64, "checkpoint: metadata");
  std::vector<json> out;
  for (int r = 0; r < world.size(); ++r)
    out.push_back(json::parse(reinterpret_cast<const char*>(recv.data() + r * words)));
  return out;
}

// Whether every rank wrote its file: a sum of failures, so that no rank waits
// for one that gave up. Rethrows this rank's error, or names the first that failed.
void agree_all_wrote(const RunMesh& mesh, const std::exception_ptr& error) {
  int64_t failed[2] = {error ? 1 : 0, error ? mesh.rank : mesh.world_size};
  if (mesh.world() != nullptr) {
    mesh.world()->all_reduce(&failed[0], 1, ElemType::i64, ReduceOp::sum, "checkpoint: all wrote");
    failed[1] = -failed[1];
    mesh.world()->all_reduce(&failed[1], 1, ElemType::i64, ReduceOp::max, "checkpoint: first failure");
    failed[1] = -failed[1];
  }
  if (error) std::rethrow_exception(error);
  MT_REQUIRE(failed[0] == 0, IoError, "checkpoint: rank ", failed[1], " could not write its files (",
             failed[0], " rank(s) failed); no checkpoint was committed");
}

void prune(const std::string& root, int64_t keep) {
  std::error_code ec;
  std::vector<std::string> complete;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) != 0) continue;
    if (name.find(".tmp-") != std::string::npos)
      fs::remove_all(e.path(), ec);  // a save that never committed
    else if (checkpoint_step(name) >= 0)
      complete.push_back(name);
  }
  std::sort(complete.begin(), complete.end());  // fixed-width step numbers: oldest first
  for (size_t i = 0; keep > 0 && i + static_cast<size_t>(keep) < complete.size(); ++i)
    remove_dir_whole((fs::path(root) / complete[i]).string(), ".tmp-removed");  // never half there
}

// Rank 0's part: metrics.jsonl and metadata.json, then the renames.
void commit(const std::string& root, const std::string& tmp, int64_t step, const TrainModel& model,
            const Config& cfg, const std::vector<std::string>& metrics_lines,
            const std::vector<json>& entries, int64_t keep) {
  std::string metrics;
  for (const std::string& line : metrics_lines)
    metrics += line + "\n";
  write_file_atomic((fs::path(tmp) / "metrics.jsonl").string(), metrics);
  json files = json::array();
  for (const json& e : entries)
    if (!e.is_null()) files.push_back(e);
  files.push_back(
      {{"name", "metrics.jsonl"}, {"bytes", metrics.size()}, {"crc32c", crc_hex(crc32c(metrics))}});
  const json meta = make_metadata(step, model, cfg, files);
  write_file_atomic((fs::path(tmp) / "metadata.json").string(), meta.dump(1) + "\n");
  const std::string final_dir = (fs::path(root) / checkpoint_name(step)).string();
  remove_dir_whole(final_dir, ".tmp-removed");  // a checkpoint of the same step from an earlier run
  publish_dir(tmp, final_dir);
  kill_point("latest_before");
  write_file_atomic((fs::path(root) / "latest").string(), checkpoint_name(step) + "\n");
  kill_point("latest_after");
  kill_point("prune_before");
  prune(root, keep);
}

}  // namespace

void save_checkpoint(const std::string& root, int64_t step, const TrainModel& model, const RunMesh& mesh,
                     const Config& cfg, const std::vector<std::string>& metrics_lines, int64_t keep) {
  // One nonce for all ranks: rank 0's pid, sent to the others.
  int64_t nonce = ::getpid();
  if (mesh.world() != nullptr) mesh.world()->broadcast(&nonce, 1, ElemType::i64, 0, "checkpoint: nonce");
  const std::string final_dir = (fs::path(root) / checkpoint_name(step)).string();
  const std::string tmp = final_dir + ".tmp-" + std::to_string(nonce);
  std::exception_ptr error;
  json entry;
  try {
    make_directories(tmp);
    entry = write_rank_file(tmp, model, mesh);
    kill_point("shard_written");
  } catch (...) {
    error = std::current_exception();
  }
  agree_all_wrote(mesh, error);
  const std::vector<json> entries = gather_entries(entry, mesh);
  if (mesh.rank == 0) {
    try {
      commit(root, tmp, step, model, cfg, metrics_lines, entries, keep);
    } catch (...) {
      error = std::current_exception();
    }
  }
  // Nobody goes on before the checkpoint is committed, or all know it was not.
  int64_t failed = error ? 1 : 0;
  if (mesh.world() != nullptr)
    mesh.world()->all_reduce(&failed, 1, ElemType::i64, ReduceOp::sum, "checkpoint: committed");
  if (error) std::rethrow_exception(error);
  MT_REQUIRE(failed == 0, IoError, "checkpoint: rank 0 could not commit ", final_dir);
}

}  // namespace mt

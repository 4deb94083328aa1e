// Writing a checkpoint (ckpt/checkpoint.h; format: docs/FORMATS.md).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_meta.h"
#include "ckpt/checkpoint_slices.h"
#include "core/atomic_dir.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/fault_point.h"
#include "core/file.h"
#include "formats/safetensors.h"

namespace mt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Copies this rank's slices (the ones it writes) into the snapshot's boxes,
// reusing snap.boxes' buffers where they are there (an async saver's previous
// snapshot: no fresh pages to fault in), the copies spread over the threads.
// Lists this rank's slices (keys, shapes, "slices") and what each box copies
// from; copy_boxes does the copies.
void plan_slices(CheckpointSnapshot& snap, const TrainModel& model, const RunMesh& mesh) {
  const MeshSizes sizes = run_sizes(mesh);
  const MeshCoords coords = run_coords(mesh);
  snap.slices = json::array();
  for (size_t c = 0; c < model.chunks.size(); ++c) {
    ParamStore& store = model.chunks[c]->store();
    const Optimizer& optim = *model.optims[c];
    for (const LocalSlice& s : local_slices(*model.chunks[c], sizes, coords)) {
      if (!s.writer) continue;
      for (int k = 0; k <= optim.state_count(); ++k) {  // the parameters, then each optimizer state
        snap.copies.push_back({s, k == 0 ? store.local_params() : optim.state(k - 1)});
        snap.keys.push_back(s.tensor + (k == 0 ? "" : optim.state_suffix(k - 1)));
        snap.shapes.push_back(s.size);
      }
      snap.slices.push_back({{"tensor", s.tensor}, {"offsets", s.offsets}, {"shape", s.size}});
    }
  }
  snap.boxes.resize(snap.copies.size());
  for (size_t i = 0; i < snap.copies.size(); ++i)
    snap.boxes[i].resize(static_cast<size_t>(snap.copies[i].slice.numel()));
}

}  // namespace

void copy_boxes(CheckpointSnapshot& snap, bool parallel) {
  const auto n = static_cast<int64_t>(snap.copies.size());
#pragma omp parallel for schedule(dynamic) if (parallel)
  for (int64_t i = 0; i < n; ++i) {
    const CheckpointSnapshot::Copy& c = snap.copies[static_cast<size_t>(i)];
    slice_to_box(c.slice, c.source, snap.boxes[static_cast<size_t>(i)].data());
  }
  snap.copies.clear();
}

namespace {

// Writes the snapshot's boxes into its folder; returns this rank's entry of
// metadata.json's "files" (null when it owns no slice): the file's size, the
// CRC32C of its header and, in each slice, of its three tensors' data (the
// bytes the boxes hold: fp32 little-endian as stored), so that a reader
// checks the slices it reads and no others.
json write_rank_file(const CheckpointSnapshot& snap, int rank) {
  if (snap.boxes.empty()) return json();
  std::vector<TensorRef> refs;
  for (size_t i = 0; i < snap.boxes.size(); ++i)
    refs.push_back({snap.keys[i], snap.shapes[i], snap.boxes[i].data()});
  const std::string name = slice_file_name(rank);
  const std::string path = (fs::path(snap.tmp) / name).string();
  write_safetensors(path, refs, {{"format", "pt"}});  // flushed to disk, then renamed in
  json slices = snap.slices;
  for (size_t s = 0; s < slices.size(); ++s) {
    json crcs = json::array();
    const size_t states = snap.boxes.size() / slices.size();  // the parameters and the optimizer's states
    for (size_t k = 0; k < states; ++k) {
      const StagingBuffer& box = snap.boxes[states * s + k];
      crcs.push_back(crc_hex(crc32c(box.data(), box.size() * sizeof(float))));
    }
    slices[s]["crc32c"] = crcs;
  }
  const SafetensorsFile written = SafetensorsFile::open(path);  // maps the file; reads its header only
  return {{"name", name},
          {"bytes", written.file_size()},
          {"header_crc32c", crc_hex(crc32c(written.header_bytes()))},
          {"slices", slices}};
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

// Rank 0's part: metrics.jsonl and metadata.json, then the renames.
void commit(const CheckpointSnapshot& snap, const std::vector<json>& entries) {
  std::string metrics;
  for (const std::string& line : snap.metrics_lines)
    metrics += line + "\n";
  write_file_atomic((fs::path(snap.tmp) / "metrics.jsonl").string(), metrics);
  json files = json::array();
  for (const json& e : entries)
    if (!e.is_null()) files.push_back(e);
  files.push_back(
      {{"name", "metrics.jsonl"}, {"bytes", metrics.size()}, {"crc32c", crc_hex(crc32c(metrics))}});
  json meta = snap.metadata;
  meta["files"] = files;
  meta["metadata_crc32c"] = metadata_checksum(meta);  // of the document with its files
  write_file_atomic((fs::path(snap.tmp) / "metadata.json").string(), meta.dump(1) + "\n");
  remove_dir_whole(snap.final_dir, ".tmp-removed");  // a checkpoint of the same step from an earlier run
  publish_dir(snap.tmp, snap.final_dir);
  kill_point("latest_before");
  write_file_atomic((fs::path(snap.root) / "latest").string(), checkpoint_name(snap.step) + "\n");
  kill_point("latest_after");
  kill_point("prune_before");
  prune_checkpoints(snap.root, snap.step, snap.keep);
}

}  // namespace

CheckpointSnapshot snapshot_checkpoint(const std::string& root, int64_t step, const TrainModel& model,
                                       const RunMesh& mesh, const Config& cfg,
                                       const std::vector<std::string>& metrics_lines, int64_t keep,
                                       std::vector<StagingBuffer> buffers, bool defer_copy) {
  CheckpointSnapshot snap;
  snap.boxes = std::move(buffers);
  // One nonce for all ranks: rank 0's pid, sent to the others.
  int64_t nonce = ::getpid();
  if (mesh.world() != nullptr) mesh.world()->broadcast(&nonce, 1, ElemType::i64, 0, "checkpoint: nonce");
  snap.root = root;
  snap.step = step;
  snap.keep = keep;
  snap.final_dir = (fs::path(root) / checkpoint_name(step)).string();
  snap.tmp = snap.final_dir + ".tmp-" + std::to_string(nonce);
  plan_slices(snap, model, mesh);
  if (!defer_copy) copy_boxes(snap, true);
  if (mesh.rank == 0) {
    snap.metrics_lines = metrics_lines;
    snap.metadata = make_metadata(step, model, cfg, json::array());
  }
  return snap;
}

void write_checkpoint_files(CheckpointSnapshot& snap, int rank) {
  try {
    make_directories(snap.tmp);
    snap.entry = write_rank_file(snap, rank);
    kill_point("shard_written");
  } catch (...) {
    snap.error = std::current_exception();
  }
}

void finalize_checkpoint(CheckpointSnapshot& snap, const RunMesh& mesh) {
  agree_all_wrote(mesh, snap.error);
  const std::vector<json> entries = gather_entries(snap.entry, mesh);
  std::exception_ptr error;
  if (mesh.rank == 0) {
    try {
      commit(snap, entries);
    } catch (...) {
      error = std::current_exception();
    }
  }
  // Nobody goes on before the checkpoint is committed, or all know it was not.
  int64_t failed = error ? 1 : 0;
  if (mesh.world() != nullptr)
    mesh.world()->all_reduce(&failed, 1, ElemType::i64, ReduceOp::sum, "checkpoint: committed");
  if (error) std::rethrow_exception(error);
  MT_REQUIRE(failed == 0, IoError, "checkpoint: rank 0 could not commit ", snap.final_dir);
}

void save_checkpoint(const std::string& root, int64_t step, const TrainModel& model, const RunMesh& mesh,
                     const Config& cfg, const std::vector<std::string>& metrics_lines, int64_t keep) {
  CheckpointSnapshot snap = snapshot_checkpoint(root, step, model, mesh, cfg, metrics_lines, keep);
  write_checkpoint_files(snap, mesh.rank);
  finalize_checkpoint(snap, mesh);
}

}  // namespace mt

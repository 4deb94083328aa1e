// Training checkpoints: the whole state of a run after N optimizer steps, so
// that a resumed run takes step N next and continues bit for bit as if never
// stopped. The directory format is docs/FORMATS.md, "Training checkpoints".
//
// Each rank writes the slices of parameters and AdamW moments it owns (no
// gather); a slice replicated over ranks is written once, by the lowest rank
// holding it. metadata.json describes every slice in global coordinates and
// records a CRC32C of every file. A checkpoint is committed as a whole: the
// ranks write into step-N.tmp-<nonce>/, agree that all wrote, and rank 0
// renames it to step-N/ and then replaces the `latest` file.
//
// A checkpoint loads into any layout (dp, tp, pp, cp, zero stage, virtual
// stages, world size): each rank reads, for every slice its own layout holds,
// the parts of the saved slices that intersect it, and only those bytes
// (train/checkpoint_read.h). The same reader serves --init-from of a
// checkpoint (weights only) and `meshtrain export` (full tensors, one process).
#pragma once

#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "config/config.h"
#include "train/checkpoint_slices.h"
#include "train/run_mesh.h"
#include "train/train_model.h"

namespace mt {

// What a checkpoint restores besides the tensors.
struct ResumeState {
  int64_t step = 0;       // optimizer steps taken: the run continues with step `step`
  int64_t bad_steps = 0;  // consecutive non-finite steps before it
  std::vector<std::string> metrics_lines;
  // Tensor bytes this rank read from the shard files, and the checkpoint's
  // total (parameters and both moments of every slice): a rank reads what its
  // layout holds, not a full copy.
  int64_t bytes_read = 0, tensor_bytes = 0;
};

// The checkpoint a run resumes from.
struct ResumeChoice {
  std::string dir;                    // "" = start fresh
  std::vector<std::string> warnings;  // --resume auto: each checkpoint passed over, and why
};

// The checkpoint `--resume` names, its files verified (verify_checkpoint).
// "auto": the newest usable checkpoint under `checkpoint_dir`: the one
// `latest` names (else the highest step-N/), and when that fails
// verify_checkpoint, the next older step-N/, and so on, with a warning for
// each one passed over; "" (start fresh) when none is usable. A function of
// the directory's contents only, so every rank that reads the same files
// picks the same one. Any other value is a checkpoint directory: ConfigError
// without a metadata.json there, DataError when it fails verify_checkpoint.
// ConfigError for "auto" without train.checkpoint_dir.
ResumeChoice resolve_resume(const std::string& resume, const std::string& checkpoint_dir);

// A checkpoint's integrity: metadata.json present, JSON, of this format
// version, with a well-formed list of files, and every listed file present
// with its size and CRC32C. DataError naming the file (and the tensors whose
// slices it holds) otherwise.
void verify_checkpoint(const std::string& dir);

// Collective over `world` (null: nothing to agree): every rank resolved
// --resume to the same `dir`; Error naming this rank's otherwise.
void require_same_resume(const std::string& dir, int rank, const Group* world);

// Start-up checks of a checkpoint before anything is built (no collective;
// every rank runs them, so that all end with the same message): the format
// version; every tensor of cfg's model present with its shape (ConfigError
// naming the tensor and both shapes); the model, optimizer and data keys of
// its config equal to cfg's unless train.resume_allow lists them (the
// parallel.* keys and the world size may differ: the loader reshards). Its
// files' integrity is resolve_resume's check (verify_checkpoint).
void check_resume(const std::string& dir, const Config& cfg, int world_size);

// Start-up check that checkpoints can be written into `dir` (created if
// missing); IoError naming the path otherwise.
void check_checkpoint_dir(const std::string& dir);

// Writes the state after `step` optimizer steps as <root>/step-<step, 8
// digits>/ and points <root>/latest at it; then removes leftover
// step-*.tmp-* folders and, with keep > 0, all but the newest `keep`
// checkpoints. Collective over the world; `metrics_lines` are rank 0's.
// The three parts below in a row.
void save_checkpoint(const std::string& root, int64_t step, const TrainModel& model, const RunMesh& mesh,
                     const Config& cfg, const std::vector<std::string>& metrics_lines, int64_t keep);

// A save in three parts, so that the write can run on another thread while
// training goes on (train.async_checkpoint, train/checkpoint_async.h):
//   snapshot_checkpoint  at the step boundary, main thread: copies this rank's
//                        slices (parameters, AdamW moments) and rank 0's
//                        metrics lines into host buffers (`buffers`: a
//                        previous snapshot's boxes, reused); collective (the
//                        folder's nonce is rank 0's). With `defer_copy` the
//                        slices are only listed, and copy_boxes copies them
//                        later, on any thread, before the parameters and
//                        moments next change (the next optimizer update);
//   write_checkpoint_files  this rank's shard file into step-N.tmp-<nonce>/; no
//                        MPI, any thread; an error is kept in the snapshot;
//   finalize_checkpoint  main thread, every rank: agree that all wrote (a write
//                        error on any rank becomes an error from every rank,
//                        nothing committed), gather the files' entries, rank 0
//                        commits (metadata.json, rename, latest, prune).
struct CheckpointSnapshot {
  struct Copy {
    LocalSlice slice;
    const float* source;
  };
  std::string root, tmp, final_dir;
  int64_t step = 0, keep = 0;
  std::vector<std::vector<float>> boxes;  // parameters, exp_avg, exp_avg_sq of each slice this rank writes
  std::vector<std::string> keys;          // boxes[i]'s key in the shard file
  std::vector<std::vector<int64_t>> shapes;
  std::vector<Copy> copies;                // the copies not made yet (defer_copy)
  nlohmann::json slices, metadata;         // this rank's "slices"; rank 0: metadata.json without "files"
  std::vector<std::string> metrics_lines;  // rank 0's
  nlohmann::json entry;                    // written: this rank's entry of "files" (null: no file)
  std::exception_ptr error;                // written: what failed
};
CheckpointSnapshot snapshot_checkpoint(const std::string& root, int64_t step, const TrainModel& model,
                                       const RunMesh& mesh, const Config& cfg,
                                       const std::vector<std::string>& metrics_lines, int64_t keep,
                                       std::vector<std::vector<float>> buffers = {}, bool defer_copy = false);
// Makes the copies a deferred snapshot still owes (over the threads if `parallel`).
void copy_boxes(CheckpointSnapshot& snap, bool parallel);
void write_checkpoint_files(CheckpointSnapshot& snap, int rank);
void finalize_checkpoint(CheckpointSnapshot& snap, const RunMesh& mesh);

// Loads the checkpoint `dir` (checked by check_resume), saved under any
// layout, into the model's parameters and optimizer state of this run's
// layout; collective over the world (ZeRO 1/2 stores all-gather the loaded
// shards). DataError naming the tensor when the saved slices leave part of a
// needed box uncovered (a corrupt metadata.json).
ResumeState load_checkpoint(const std::string& dir, TrainModel& model, const RunMesh& mesh);

// `meshtrain export`: writes the Hugging Face model directory that `--save`
// writes (train/model_io.h) from the checkpoint `dir`, each full tensor
// assembled from its slices; one process. DataError naming the path if `dir`
// is not a checkpoint or a file is corrupt, IoError if `out` cannot be written.
void export_checkpoint(const std::string& dir, const std::string& out);

}  // namespace mt

// Training checkpoints: the whole state of a run after N optimizer steps, so
// that a resumed run takes step N next and continues bit for bit as if never
// stopped. The directory format is docs/FORMATS.md, "Training checkpoints".
//
// Each rank writes the slices of parameters and AdamW moments it owns (no
// gather); a slice replicated over ranks is written once, by the lowest rank
// holding it. metadata.json describes every slice in global coordinates and
// records a CRC32C of each slice's data (per state) and of each file's header. A checkpoint is committed as a
// whole: the ranks write into step-N.tmp-<nonce>/, agree that all wrote, and rank 0 renames it to step-N/ and
// then replaces the `latest` file.
//
// A checkpoint loads into any layout (dp, tp, pp, cp, zero stage, virtual
// stages, world size): each rank reads, for every slice its own layout holds,
// the parts of the saved slices that intersect it, after checking the CRC32C
// of each saved slice it touches (read whole for that): a rank reads the saved
// slices its layout intersects, no others (ckpt/checkpoint_read.h). The same reader serves --init-from of a
// checkpoint (weights only) and `meshtrain export` (full tensors, one process).
#pragma once

#include <cstdint>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ckpt/checkpoint_slices.h"
#include "config/config.h"
#include "core/memory.h"
#include "train/run_mesh.h"
#include "train/train_model.h"

namespace mt {

// What a checkpoint restores besides the tensors.
struct ResumeState {
  int64_t step = 0;       // optimizer steps taken: the run continues with step `step`
  int64_t bad_steps = 0;  // consecutive non-finite steps before it
  std::vector<std::string> metrics_lines;
  // Tensor bytes this rank read from the shard files for checksums (the saved
  // slices its layout intersects, whole), the bytes it copied out of them,
  // and the checkpoint's total (parameters and both moments of every slice):
  // a rank reads what its layout needs, not a full copy.
  int64_t bytes_checked = 0, bytes_read = 0, tensor_bytes = 0;
};

// The checkpoint a run resumes from.
struct ResumeChoice {
  std::string dir;                    // "" = start fresh
  std::vector<std::string> warnings;  // --resume auto: each checkpoint passed over, and why
};

// The checkpoint `--resume` names, passing verify_checkpoint (no shard file
// read: the ranks check the slices they read in open_resume). "auto": the
// newest usable checkpoint under `checkpoint_dir`: the one `latest` names
// (else the highest step-N/), and when that fails verify_checkpoint, the next
// older step-N/, and so on, with a warning for each one passed over; ""
// (start fresh) when none is usable. With `older_than` >= 0, only those of a
// lower step (open_resume's fallback). A function of the directory's contents
// only, so every rank that reads the same files picks the same one. Any other
// value is a checkpoint directory: ConfigError without a metadata.json there,
// DataError when it fails verify_checkpoint. ConfigError for "auto" without
// train.checkpoint_dir.
ResumeChoice resolve_resume(const std::string& resume, const std::string& checkpoint_dir,
                            int64_t older_than = -1);

// A checkpoint's integrity as far as it shows without reading the shard
// files: metadata.json present, JSON, of this format version, passing its own
// checksum, with a well-formed list of files and slices (each with its
// checksums) that tile every tensor with no hole or overlap; every listed
// file present with its size (stat); metrics.jsonl's CRC32C. DataError naming
// the file or tensor otherwise. The slices' checksums are checked by the
// ranks that read them (CheckpointReader, open_resume).
void verify_checkpoint(const std::string& dir);

class CheckpointReader;

// Collective over the world, after the model is built and before anything is
// loaded. Settles the checkpoint a run resumes from, starting at `dir`
// (resolve_resume's choice, checked by check_resume): each rank checks the
// CRC32C of every saved slice its layout will read (parameters and both
// moments), and the ranks' verdicts are combined by an all-reduce before any
// rank commits. With --resume auto a checkpoint that any rank found damaged
// is passed over with one warning (from the lowest rank that found it) that
// names the file and the tensor, and the next older one is tried (check_resume
// first); null when none is left (start fresh). With --resume PATH a damaged
// one ends every rank with one message (agree_on_startup_errors; one
// process: DataError). Returns the reader of the checkpoint taken, its slices
// checked (load_checkpoint does not read them again for that).
std::unique_ptr<CheckpointReader> open_resume(const std::string& resume, std::string dir, const Config& cfg,
                                              TrainModel& model, const RunMesh& mesh);

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

// The complete checkpoints (step-N/ folders) under `root`, by step, oldest first.
std::vector<int64_t> checkpoint_steps(const std::string& root);

// Start-up check of a run without --resume (`resume` empty): ConfigError
// naming them when `root` (train.checkpoint_dir) already holds checkpoints,
// which the run's first save would otherwise mix with its own.
void check_fresh_start(const std::string& root, const std::string& resume);

// A rollback, on rank 0 once the resumed step is settled (`step`; 0 when the
// run starts fresh, --resume auto having passed over every checkpoint):
// checkpoints under `root` newer than `step` are superseded. `latest` is
// rewritten to name step-<step> (step-00000000 names none), so --resume auto
// passes over them from now on, and the run's first commit removes them.
// Returns the note naming them ("" when there are none).
std::string supersede_newer(const std::string& root, int64_t step);

// The prune after committing `committed` (rank 0, under the run's lock):
// leftover step-*.tmp-* folders and the checkpoints newer than `committed`
// (superseded) go, and with keep > 0 all but `committed` and the newest
// keep − 1 older ones; never `committed` itself.
void prune_checkpoints(const std::string& root, int64_t committed, int64_t keep);

// Writes the state after `step` optimizer steps as <root>/step-<step, 8
// digits>/ and points <root>/latest at it; then prune_checkpoints.
// Collective over the world; `metrics_lines` are rank 0's.
// The three parts below in a row.
void save_checkpoint(const std::string& root, int64_t step, const TrainModel& model, const RunMesh& mesh,
                     const Config& cfg, const std::vector<std::string>& metrics_lines, int64_t keep);

// One box of a snapshot: host memory charged to MemKind::ckpt_staging.
using StagingBuffer = TrackedVector<float, MemKind::ckpt_staging>;

// A save in three parts, so that the write can run on another thread while
// training goes on (train.async_checkpoint, ckpt/checkpoint_async.h):
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
  std::vector<StagingBuffer> boxes;  // parameters, exp_avg, exp_avg_sq of each slice this rank writes
  std::vector<std::string> keys;     // boxes[i]'s key in the shard file
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
                                       std::vector<StagingBuffer> buffers = {}, bool defer_copy = false);
// Makes the copies a deferred snapshot still owes (over the threads if `parallel`).
void copy_boxes(CheckpointSnapshot& snap, bool parallel);
void write_checkpoint_files(CheckpointSnapshot& snap, int rank);
void finalize_checkpoint(CheckpointSnapshot& snap, const RunMesh& mesh);

// Loads the checkpoint open_resume returned, saved under any layout, into
// the model's parameters and optimizer state of this run's layout; collective
// over the world (ZeRO 1/2 stores all-gather the loaded shards).
ResumeState load_checkpoint(CheckpointReader& reader, TrainModel& model, const RunMesh& mesh);

// The full model of the checkpoint `dir` (`meshtrain export`, which writes it
// as a model directory: train/model_io.h): its model configuration and every
// parameter, laid out as make_param_table(cfg), each full tensor assembled
// from its slices, after checking every slice's checksums (both moments'
// too); one process. DataError naming the path if `dir` is not a checkpoint
// or a file is corrupt.
struct CheckpointModel {
  ModelConfig cfg;
  std::vector<float> full;
};
CheckpointModel read_checkpoint_model(const std::string& dir);

}  // namespace mt

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
// Resuming needs the same layout (dp, tp, pp, cp, zero, virtual stages, world
// size); resharding a checkpoint into another layout is not implemented yet.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "train/run_mesh.h"
#include "train/train_model.h"

namespace mt {

// What a checkpoint restores besides the tensors.
struct ResumeState {
  int64_t step = 0;       // optimizer steps taken: the run continues with step `step`
  int64_t bad_steps = 0;  // consecutive non-finite steps before it
  std::vector<std::string> metrics_lines;
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
// version; the same layout as cfg's on `world_size` ranks (else ConfigError
// "resharding a checkpoint is not implemented yet: saved with ...; this run
// has ..."); every tensor of cfg's model present with its shape (ConfigError
// naming the tensor and both shapes). Its files' integrity is resolve_resume's
// check (verify_checkpoint).
void check_resume(const std::string& dir, const Config& cfg, int world_size);

// Start-up check that checkpoints can be written into `dir` (created if
// missing); IoError naming the path otherwise.
void check_checkpoint_dir(const std::string& dir);

// Writes the state after `step` optimizer steps as <root>/step-<step, 8
// digits>/ and points <root>/latest at it; then removes leftover
// step-*.tmp-* folders and, with keep > 0, all but the newest `keep`
// checkpoints. Collective over the world; `metrics_lines` are rank 0's.
void save_checkpoint(const std::string& root, int64_t step, const TrainModel& model, const RunMesh& mesh,
                     const Config& cfg, const std::vector<std::string>& metrics_lines, int64_t keep);

// Loads the checkpoint `dir` (checked by check_resume) into the model's
// parameters and optimizer state; collective over the world (ZeRO 1/2
// stores all-gather the loaded shards).
ResumeState load_checkpoint(const std::string& dir, TrainModel& model, const RunMesh& mesh);

}  // namespace mt

// metadata.json of a checkpoint (docs/FORMATS.md, "Training checkpoints"): names,
// the layout record, and the document itself. Internal to ckpt/checkpoint_*.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.h"
#include "train/train_model.h"

namespace mt {

// 2: a CRC32C per slice and state, and per file header (1: one per file).
inline constexpr int kCheckpointFormatVersion = 2;
// A tensor's keys in the slice files: its name for the parameters, plus the
// optimizer's state suffixes (optim/optimizer.h Optimizer::state_suffix), as
// metadata.json's "states" lists them: checkpoint_states(model).

std::vector<std::string> checkpoint_states(const TrainModel& model);

// "step-00000123"; checkpoint_step is its inverse (−1 for any other name).
std::string checkpoint_name(int64_t step);
int64_t checkpoint_step(const std::string& name);

// "e3069283"
std::string crc_hex(uint32_t crc);

// The layout a checkpoint's slices depend on, as metadata.json's "layout".
nlohmann::json layout_record(const ParallelConfig& p, int world_size);

// The whole document, its metadata_crc32c included.
nlohmann::json make_metadata(int64_t step, const TrainModel& model, const Config& cfg,
                             const nlohmann::json& files);

// metadata.json's checksum of itself, its "metadata_crc32c": the CRC32C of
// the compact dump (nlohmann's, keys sorted) of the document without that key.
std::string metadata_checksum(nlohmann::json meta);

// Parses dir/metadata.json; DataError naming the file if it is missing, not
// JSON, not of this format version or fails its own checksum.
// Also check_metadata_fields.
nlohmann::json read_metadata(const std::string& dir);

// The fields a checksum cannot vouch for (a forged metadata.json carries a
// valid one): step ≥ 0 and equal to the step-N folder's N, bad_steps and
// adam_steps in [0, step], "config" and "tensors" objects (config values
// strings; the lists of files and slices are the reader's to check).
// DataError naming the checkpoint, the field and the rule otherwise.
void check_metadata_fields(const nlohmann::json& meta, const std::string& dir);

// The size of the checkpoint file `path`, which metadata.json says is
// `listed` bytes: DataError, ending with `context`, when it is not a regular
// file or has another size.
uint64_t checked_file_size(const std::string& path, uint64_t listed, const std::string& context);

}  // namespace mt

// metadata.json of a checkpoint (docs/FORMATS.md, "Training checkpoints"): names,
// the layout record, and the document itself. Internal to train/checkpoint_*.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "config/config.h"
#include "train/train_model.h"

namespace mt {

inline constexpr int kCheckpointFormatVersion = 1;
// The keys of a tensor's parameters and AdamW moments in the slice files.
inline constexpr const char* kStateSuffix[3] = {"", ".exp_avg", ".exp_avg_sq"};

// "step-00000123"; checkpoint_step is its inverse (−1 for any other name).
std::string checkpoint_name(int64_t step);
int64_t checkpoint_step(const std::string& name);

// "e3069283"
std::string crc_hex(uint32_t crc);

// The layout a checkpoint's slices depend on, as metadata.json's "layout".
nlohmann::json layout_record(const ParallelConfig& p, int world_size);

nlohmann::json make_metadata(int64_t step, const TrainModel& model, const Config& cfg,
                             const nlohmann::json& files);

// Parses dir/metadata.json; DataError naming the file if it is missing or not
// JSON or not of this format version.
nlohmann::json read_metadata(const std::string& dir);

// Every file metadata.json lists is present with its size and CRC32C;
// DataError naming the file otherwise. Reads each file whole.
void check_checkpoint_files(const std::string& dir, const nlohmann::json& meta);

}  // namespace mt

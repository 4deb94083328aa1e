// Reading the slices of a checkpoint into any box of a tensor
// (train/checkpoint.h; format: docs/FORMATS.md "Training checkpoints").
//
// The writer saved each tensor as slices, each a box in global coordinates
// (metadata.json's "files"[].slices). A reader asks for another box — the
// one its own layout holds — and gets every element of it from the saved
// slices that intersect it, copying each intersection row by row with ranged
// reads of the mapped shard files: a rank touches only the bytes of the
// elements it holds (rounded to pages by the kernel), never a whole file it
// does not need. Resuming, --init-from and `meshtrain export` read this way.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/safetensors.h"
#include "model/config.h"
#include "model/llama.h"
#include "train/checkpoint_slices.h"

namespace mt {

class CheckpointReader {
 public:
  // Parses dir/metadata.json (read_metadata's DataErrors). DataError naming
  // the tensor when two saved slices of it overlap or one lies outside it.
  explicit CheckpointReader(const std::string& dir);

  const nlohmann::json& metadata() const { return meta_; }

  // Fills box[Π size] (row-major) with the elements [offsets, offsets + size)
  // of `tensor` + `suffix` ("", ".exp_avg", ".exp_avg_sq"). DataError naming
  // the tensor when the saved slices leave part of the box uncovered, or
  // naming the file when it lacks the slice metadata.json places there.
  void read_box(const std::string& tensor, const std::string& suffix, const std::vector<int64_t>& offsets,
                const std::vector<int64_t>& size, float* box);

  // Bytes of tensor data copied out of the shard files so far, and the total
  // of all tensor data in the checkpoint (what one full copy would read).
  int64_t bytes_read() const { return bytes_read_; }
  int64_t tensor_bytes() const { return tensor_bytes_; }

 private:
  struct Saved {
    std::string file;
    std::vector<int64_t> offsets, shape;
  };
  const SafetensorsFile& open(const std::string& file);

  std::string dir_;
  nlohmann::json meta_;
  std::map<std::string, std::vector<Saved>> saved_;  // by tensor
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
  int64_t bytes_read_ = 0, tensor_bytes_ = 0;
};

// The model configuration a checkpoint was saved with (its "config" record's
// model.* keys); DataError naming the key if one is missing or malformed.
ModelConfig checkpoint_model_config(const nlohmann::json& meta, const std::string& dir);

// Whether `dir` holds a metadata.json (a checkpoint rather than a model directory).
bool is_checkpoint_dir(const std::string& dir);

// One state of the slices to read: the tensor key's suffix ("" for the
// parameters, or an optimizer state's: ".exp_avg", ".momentum_buffer", ...)
// and the padded local buffer it goes to.
struct StateTarget {
  const char* suffix;
  float* buffer;
};

// Reads this rank's slices of `chunk` (local_slices) into each target's buffer.
void read_chunk_slices(CheckpointReader& reader, Llama& chunk, const MeshSizes& sizes,
                       const MeshCoords& coords, const std::vector<StateTarget>& targets);

// Loads the parameters of this rank's slices of `chunk` from the checkpoint,
// leaving everything else (optimizer state, step) alone: --init-from of a
// checkpoint. Collective over the store's group (ZeRO 1/2 all-gather).
void load_checkpoint_params(CheckpointReader& reader, Llama& chunk, const MeshSizes& sizes,
                            const MeshCoords& coords);

}  // namespace mt

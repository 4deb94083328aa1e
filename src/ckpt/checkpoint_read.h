// Reading the slices of a checkpoint into any box of a tensor
// (ckpt/checkpoint.h; format: docs/FORMATS.md "Training checkpoints").
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

#include "ckpt/checkpoint_slices.h"
#include "formats/safetensors.h"
#include "model/config.h"
#include "model/llama.h"

namespace mt {

class CheckpointReader {
 public:
  // Parses dir/metadata.json (read_metadata's DataErrors). DataError naming
  // the tensor when two saved slices of it overlap, one lies outside it, or
  // together they leave part of it uncovered (a hole), or naming metadata.json
  // when its list of files lacks a field (a slice's checksums, a file's size).
  // Reads no shard file.
  explicit CheckpointReader(const std::string& dir);

  const nlohmann::json& metadata() const { return meta_; }
  const std::string& dir() const { return dir_; }

  // Checks the CRC32C of every saved slice of `tensor` + `suffix` ("",
  // ".exp_avg", ".exp_avg_sq") that intersects the box [offsets, offsets +
  // size), reading each such slice whole once (a slice is the unit its
  // checksum covers), and of the header of each file it opens, with the
  // file's size. DataError naming the file and the tensor on a mismatch, a
  // truncated file or one that lacks the slice; IoError for a missing one.
  void verify_box(const std::string& tensor, const std::string& suffix, const std::vector<int64_t>& offsets,
                  const std::vector<int64_t>& size);
  // verify_box of every saved slice of every tensor, all three states
  // (`meshtrain export`: one process reads everything).
  void verify_all();

  // Fills box[Π size] (row-major) with the elements [offsets, offsets + size)
  // of `tensor` + `suffix`, after verify_box of the same box (slices checked
  // before are not read again for it).
  void read_box(const std::string& tensor, const std::string& suffix, const std::vector<int64_t>& offsets,
                const std::vector<int64_t>& size, float* box);

  // Bytes of tensor data this reader read for checksums (each slice it
  // touched, whole, once), the bytes it copied out of them into boxes (a
  // subset of the same pages), and the total of all tensor data in the
  // checkpoint (what one full copy would read).
  int64_t bytes_checked() const { return bytes_checked_; }
  int64_t bytes_read() const { return bytes_read_; }
  int64_t tensor_bytes() const { return tensor_bytes_; }

 private:
  struct Saved {
    std::string file;
    std::vector<int64_t> offsets, shape;
    std::vector<std::string> crc;  // of the data of each state (metadata.json's "states", in order)
    std::vector<char> checked;
  };
  struct FileInfo {
    uint64_t bytes = 0;
    std::string header_crc;
  };
  void index_slices();
  void check_coverage() const;
  // The shard file, opened once: its size and header's CRC32C checked
  // (errors name `tensor`, the one being read).
  const SafetensorsFile& open(const std::string& file, const std::string& tensor);
  void verify_slice(const std::string& tensor, Saved& s, size_t state);
  size_t state_of(const std::string& suffix) const;  // its index in states_ (DataError if not saved)

  std::string dir_;
  nlohmann::json meta_;
  std::vector<std::string> states_;                  // "", then the optimizer's state suffixes
  std::map<std::string, std::vector<Saved>> saved_;  // by tensor
  std::map<std::string, FileInfo> files_;            // the shard files, by name
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
  int64_t bytes_checked_ = 0, bytes_read_ = 0, tensor_bytes_ = 0;
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
// verify_chunk_slices checks, without copying, the checksums of the saved
// slices that `suffixes` of this rank's slices read (the resume's agreed check).
void verify_chunk_slices(CheckpointReader& reader, Llama& chunk, const MeshSizes& sizes,
                         const MeshCoords& coords, const std::vector<std::string>& suffixes);

// Loads the parameters of this rank's slices of `chunk` from the checkpoint,
// leaving everything else (optimizer state, step) alone: --init-from of a
// checkpoint. Collective over the store's group (ZeRO 1/2 all-gather).
void load_checkpoint_params(CheckpointReader& reader, Llama& chunk, const MeshSizes& sizes,
                            const MeshCoords& coords);

}  // namespace mt

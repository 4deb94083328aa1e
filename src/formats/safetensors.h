// safetensors, the tensor file format of Hugging Face:
//
//   [8 bytes]  N, little-endian uint64: length of the header
//   [N bytes]  JSON object, padded with spaces to a multiple of 8 (our writer):
//              {"__metadata__": {"key": "value", ...},
//               "<name>": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...}
//   [rest]     data buffer; [begin, end) is relative to its start, tensors are
//              contiguous and row-major, little-endian. The tensors tile the
//              buffer exactly (no gaps, overlaps or trailing bytes); the reader
//              refuses a file where they do not.
//
// We write fp32 only. We read F32, and also BF16 and F16 (widened exactly to
// fp32), since published Hugging Face checkpoints are often 16-bit.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace mt {

// A tensor to write: numel_of(shape) floats at `data` (may be null when the
// shape has a zero dimension). A 0-d tensor has shape {} and one element.
struct TensorRef {
  std::string name;
  std::vector<int64_t> shape;
  const float* data;
};

// Writes `tensors` as F32 in the given order, atomically (temporary file in the
// same directory, then rename). ConfigError for an empty, duplicate or reserved
// name or a negative dimension; IoError naming the path if a write fails.
// With `crc` (non-null), *crc is the CRC-32C of the whole file, computed from
// the bytes as they are written (no read back).
void write_safetensors(const std::string& path, const std::vector<TensorRef>& tensors,
                       const std::map<std::string, std::string>& metadata = {}, uint32_t* crc = nullptr);

// A safetensors file opened for reading through mmap; the header is validated
// in full by open(), so that the accessors below only fail on caller errors.
class SafetensorsFile {
 public:
  // IoError if the file cannot be opened or mapped; DataError naming the file,
  // the value and the rule it breaks if the file is malformed.
  static SafetensorsFile open(const std::string& path);

  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Tensor names in header order (the order in which they were written by us).
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  // The accessors below throw DataError for an unknown name, listing a few
  // names that the file does hold.
  const std::vector<int64_t>& shape(const std::string& name) const;
  int64_t numel(const std::string& name) const;
  const std::string& dtype(const std::string& name) const;  // "F32", "BF16", "I64", ...
  // Copies tensor `name` into out[0, numel), converting to fp32. DataError if
  // `numel` differs from the tensor's or its dtype is not F32, BF16 or F16.
  void read_f32(const std::string& name, float* out, int64_t numel) const;
  // Copies elements [first, first + n) of tensor `name` (row-major, flat
  // index) into out[0, n), converting to fp32: a ranged read that touches
  // only those bytes of the mapped file (a run of rows of dim 0, or part of
  // one row). DataError if the range is not inside the tensor or its dtype is
  // not F32, BF16 or F16.
  void read_f32_range(const std::string& name, int64_t first, int64_t n, float* out) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The stored bytes, for checksums (docs/FORMATS.md, "Training checkpoints"):
  // the length and JSON header, [0, 8 + N) of the file, and tensor `name`'s
  // data, its data_offsets range (the tensors and the header tile the file).
  std::string_view header_bytes() const;
  std::string_view raw_bytes(const std::string& name) const;
  size_t file_size() const { return map_size_; }

 private:
  struct Entry {
    std::string dtype;
    std::vector<int64_t> shape;
    int64_t numel = 0;
    uint64_t begin = 0;  // byte range in the data buffer
    uint64_t end = 0;
  };

  SafetensorsFile() = default;
  const Entry& entry(const std::string& name) const;
  void parse_header(const char* header, uint64_t header_len, uint64_t data_len);
  void check_tiling(uint64_t data_len) const;

  std::string path_;
  void* map_ = nullptr;  // whole file, read-only
  size_t map_size_ = 0;
  const unsigned char* data_ = nullptr;  // start of the data buffer
  std::vector<std::string> names_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace mt

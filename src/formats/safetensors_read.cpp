#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>

#include "core/error.h"
#include "core/file.h"
#include "formats/half.h"
#include "formats/safetensors.h"

namespace mt {
namespace {

using Json = nlohmann::ordered_json;

// Bytes per element of every dtype the format defines. Files may hold any of
// them (e.g. int64 buffers); read_f32 converts only the floating ones we know.
int dtype_size(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},  {"I32", 4},     {"I16", 2},    {"I8", 1},
      {"U64", 8}, {"U32", 4}, {"U16", 2}, {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

// A non-negative JSON integer, or nothing.
bool as_u64(const Json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) return false;
  *out = v.get<uint64_t>();
  return true;
}

}  // namespace

#define MT_BAD_FILE(...) MT_THROW(DataError, "safetensors file '", path_, "': ", __VA_ARGS__)

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  int64_t file_bytes = 0;
  const int fd = open_regular_file(path, kMaxMappedFile, "safetensors file", &file_bytes);
  const uint64_t size = static_cast<uint64_t>(file_bytes);
  if (size < 8) {
    ::close(fd);
    MT_THROW(DataError, "safetensors file '", path, "': ", size,
             " bytes is shorter than the 8-byte header length field");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file alive
  if (map == MAP_FAILED) MT_THROW(IoError, "cannot mmap '", path, "': ", std::system_category().message(err));
  f.map_ = map;
  f.map_size_ = size;

  const auto* bytes = static_cast<const unsigned char*>(map);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes, 8);  // little-endian host (checked in safetensors_write.cpp)
  if (header_len > size - 8) {
    MT_THROW(DataError, "safetensors file '", path, "': header length ", header_len, " exceeds the ",
             size - 8, " bytes that follow the length field");
  }
  f.data_ = bytes + 8 + header_len;
  f.parse_header(reinterpret_cast<const char*>(bytes + 8), header_len, size - 8 - header_len);
  return f;
}

void SafetensorsFile::parse_header(const char* header, uint64_t header_len, uint64_t data_len) {
  Json root;
  try {
    root = Json::parse(header, header + header_len);
  } catch (const Json::exception& e) {
    MT_BAD_FILE("header is not valid JSON: ", e.what());
  }
  if (!root.is_object()) MT_BAD_FILE("header must be a JSON object, got ", root.type_name());
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) MT_BAD_FILE("__metadata__ must be an object, got ", value.type_name());
      for (const auto& [key, v] : value.items()) {
        if (!v.is_string()) MT_BAD_FILE("__metadata__ value of '", key, "' must be a string, got ", v.dump());
        metadata_[key] = v.get<std::string>();
      }
      continue;
    }
    if (!value.is_object()) MT_BAD_FILE("entry '", name, "' must be an object, got ", value.dump());
    for (const char* key : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(key)) MT_BAD_FILE("tensor '", name, "' has no \"", key, "\"");
    }
    Entry e;
    const Json& dtype = value["dtype"];
    if (!dtype.is_string()) MT_BAD_FILE("tensor '", name, "': dtype must be a string, got ", dtype.dump());
    e.dtype = dtype.get<std::string>();
    const int elem = dtype_size(e.dtype);
    if (elem == 0) MT_BAD_FILE("tensor '", name, "': unsupported dtype '", e.dtype, "'");

    const Json& shape = value["shape"];
    if (!shape.is_array()) MT_BAD_FILE("tensor '", name, "': shape must be an array, got ", shape.dump());
    uint64_t numel = 1;
    for (const Json& d : shape) {
      uint64_t dim = 0;
      if (!as_u64(d, &dim) || dim > static_cast<uint64_t>(INT64_MAX)) {
        MT_BAD_FILE("tensor '", name, "': shape ", shape.dump(), " must hold non-negative integers");
      }
      if (__builtin_mul_overflow(numel, dim, &numel) || numel > static_cast<uint64_t>(INT64_MAX)) {
        MT_BAD_FILE("tensor '", name, "': shape ", shape.dump(), " has too many elements");
      }
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    e.numel = static_cast<int64_t>(numel);

    const Json& offsets = value["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2 || !as_u64(offsets[0], &e.begin) ||
        !as_u64(offsets[1], &e.end)) {
      MT_BAD_FILE("tensor '", name, "': data_offsets must be [begin, end] with non-negative integers, got ",
                  offsets.dump());
    }
    if (e.begin > e.end || e.end > data_len) {
      MT_BAD_FILE("tensor '", name, "': data_offsets ", offsets.dump(),
                  " must satisfy begin <= end <= data buffer size (", data_len, " bytes)");
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(elem), &nbytes) || e.end - e.begin != nbytes) {
      MT_BAD_FILE("tensor '", name, "': data_offsets ", offsets.dump(), " span ", e.end - e.begin,
                  " bytes but shape ", shape.dump(), " of ", e.dtype, " needs ", numel, " x ", elem,
                  " bytes");
    }
    names_.push_back(name);
    entries_.emplace(name, std::move(e));
  }
  check_tiling(data_len);
}

// The tensors must tile the data buffer exactly, as the format's reference
// reader requires: sorted by offset, each begins where the previous ended, the
// first at 0 and the last at the end of the buffer. A gap, an overlap or
// trailing bytes mean the header and the data disagree (e.g. bytes inserted
// after the header shift every tensor), so the file is refused rather than
// read at the wrong place.
void SafetensorsFile::check_tiling(uint64_t data_len) const {
  std::vector<std::pair<uint64_t, uint64_t>> spans;  // (begin, end), every tensor
  std::map<uint64_t, std::string> name_at;           // for the message only
  for (const auto& [name, e] : entries_) {
    spans.emplace_back(e.begin, e.end);
    name_at.emplace(e.begin, name);
  }
  std::sort(spans.begin(), spans.end());
  uint64_t covered = 0;
  for (const auto& [begin, end] : spans) {
    if (begin != covered) {
      MT_BAD_FILE("tensor '", name_at[begin], "' begins at byte ", begin,
                  " of the data buffer but the tensors ", "before it end at byte ", covered, " (",
                  begin > covered ? "gap" : "overlap", "); tensors must tile the data buffer exactly");
    }
    covered = end;
  }
  if (covered != data_len) {
    MT_BAD_FILE("the tensors cover ", covered, " bytes but the data buffer holds ", data_len,
                " (trailing bytes); tensors must tile the data buffer exactly");
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      data_(std::exchange(other.data_, nullptr)),
      names_(std::move(other.names_)),
      entries_(std::move(other.entries_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (map_ != nullptr) ::munmap(map_, map_size_);
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    data_ = std::exchange(other.data_, nullptr);
    names_ = std::move(other.names_);
    entries_ = std::move(other.entries_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

const SafetensorsFile::Entry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it != entries_.end()) return it->second;
  std::string some;
  for (size_t i = 0; i < names_.size() && i < 5; ++i)
    some += (i ? ", " : "") + names_[i];
  if (names_.size() > 5) some += ", ...";
  MT_BAD_FILE("no tensor named '", name, "'; the file holds ", names_.size(), " tensors: ", some);
}

const std::vector<int64_t>& SafetensorsFile::shape(const std::string& name) const {
  return entry(name).shape;
}
int64_t SafetensorsFile::numel(const std::string& name) const {
  return entry(name).numel;
}
const std::string& SafetensorsFile::dtype(const std::string& name) const {
  return entry(name).dtype;
}

void SafetensorsFile::read_f32(const std::string& name, float* out, int64_t numel) const {
  const Entry& e = entry(name);
  if (numel != e.numel) {
    MT_BAD_FILE("tensor '", name, "' has ", e.numel, " elements but the destination holds ", numel);
  }
  read_f32_range(name, 0, numel, out);
}

void SafetensorsFile::read_f32_range(const std::string& name, int64_t first, int64_t n, float* out) const {
  const Entry& e = entry(name);
  if (first < 0 || n < 0 || first > e.numel || n > e.numel - first) {
    MT_BAD_FILE("elements [", first, ", ", first + n, ") of tensor '", name, "' are not inside its ",
                e.numel);
  }
  // The data buffer need not be aligned (files from other writers may not pad
  // the header), so every element is read with memcpy.
  const auto count = static_cast<size_t>(n);
  if (e.dtype == "F32") {
    if (count > 0)
      std::memcpy(out, data_ + e.begin + 4 * static_cast<uint64_t>(first), count * sizeof(float));
  } else if (e.dtype == "BF16" || e.dtype == "F16") {
    const bool bf16 = e.dtype == "BF16";
    const unsigned char* src = data_ + e.begin + 2 * static_cast<uint64_t>(first);
    for (size_t i = 0; i < count; ++i) {
      uint16_t h = 0;
      std::memcpy(&h, src + 2 * i, 2);
      out[i] = bf16 ? bf16_to_f32(h) : f16_to_f32(h);
    }
  } else {
    MT_BAD_FILE("tensor '", name, "' has dtype ", e.dtype, "; only F32, BF16 and F16 can be read as fp32");
  }
}

std::string_view SafetensorsFile::header_bytes() const {
  const auto* start = static_cast<const unsigned char*>(map_);
  return {reinterpret_cast<const char*>(start), static_cast<size_t>(data_ - start)};
}

std::string_view SafetensorsFile::raw_bytes(const std::string& name) const {
  const Entry& e = entry(name);
  return {reinterpret_cast<const char*>(data_ + e.begin), static_cast<size_t>(e.end - e.begin)};
}

#undef MT_BAD_FILE

}  // namespace mt

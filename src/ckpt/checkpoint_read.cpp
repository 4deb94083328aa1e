// Reading checkpoint slices into any box (ckpt/checkpoint_read.h).
#include "ckpt/checkpoint_read.h"

#include <algorithm>
#include <filesystem>
#include <utility>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_meta.h"
#include "config/config.h"
#include "core/checked.h"
#include "core/crc32c.h"
#include "core/error.h"
#include "core/file.h"
#include "model/params.h"

namespace mt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string box_text(const std::vector<int64_t>& offsets, const std::vector<int64_t>& size) {
  std::string t = "[";
  for (size_t d = 0; d < size.size(); ++d)
    t += (d ? ", " : "") + std::to_string(offsets[d]) + ":" + std::to_string(offsets[d] + size[d]);
  return t + "]";
}

// Element count of a box of `size` read from metadata.json: DataError on overflow
// (a forged shape must not wrap around to a count the slices happen to cover).
int64_t volume(const std::vector<int64_t>& size) {
  return checked_numel<DataError>(size, "a tensor or slice in metadata.json");
}

// Row-major strides of a box of `size`.
std::vector<int64_t> strides(const std::vector<int64_t>& size) {
  std::vector<int64_t> st(size.size(), 1);
  for (size_t d = size.size(); d-- > 1;)
    st[d - 1] = st[d] * size[d];
  return st;
}

// Whether the box lies inside a tensor of `shape` (same rank, non-negative).
bool inside(const std::vector<int64_t>& off, const std::vector<int64_t>& size,
            const std::vector<int64_t>& shape) {
  if (off.size() != shape.size() || size.size() != shape.size()) return false;
  for (size_t d = 0; d < shape.size(); ++d)
    if (off[d] < 0 || size[d] < 0 || off[d] + size[d] > shape[d]) return false;
  return true;
}

// The intersection [lo, hi) of two boxes; false when it is empty.
bool intersect(const std::vector<int64_t>& a_off, const std::vector<int64_t>& a_size,
               const std::vector<int64_t>& b_off, const std::vector<int64_t>& b_size,
               std::vector<int64_t>& lo, std::vector<int64_t>& hi) {
  lo.resize(a_size.size());
  hi.resize(a_size.size());
  for (size_t d = 0; d < a_size.size(); ++d) {
    lo[d] = std::max(a_off[d], b_off[d]);
    hi[d] = std::min(a_off[d] + a_size[d], b_off[d] + b_size[d]);
    if (lo[d] >= hi[d]) return false;
  }
  return true;
}

// f(flat index in box a, flat index in box b, n) for each run of the
// intersection [lo, hi) that is contiguous in both boxes: rows along the last
// dim, merged while they continue each other in both (whole rows of dim 0
// when the boxes share their trailing extents).
template <class F>
void for_each_run(const std::vector<int64_t>& a_off, const std::vector<int64_t>& a_size,
                  const std::vector<int64_t>& b_off, const std::vector<int64_t>& b_size,
                  const std::vector<int64_t>& lo, const std::vector<int64_t>& hi, F&& f) {
  const size_t nd = lo.size();
  if (nd == 0) return f(0, 0, 1);
  const std::vector<int64_t> sa = strides(a_size), sb = strides(b_size);
  const int64_t run = hi[nd - 1] - lo[nd - 1];
  std::vector<int64_t> idx(lo.begin(), lo.end());
  int64_t pa = -1, pb = -1, pn = 0;  // the pending merged run
  while (true) {
    int64_t ia = 0, ib = 0;
    for (size_t d = 0; d < nd; ++d) {
      ia += (idx[d] - a_off[d]) * sa[d];
      ib += (idx[d] - b_off[d]) * sb[d];
    }
    if (pn > 0 && ia == pa + pn && ib == pb + pn) {
      pn += run;
    } else {
      if (pn > 0) f(pa, pb, pn);
      pa = ia, pb = ib, pn = run;
    }
    size_t d = nd - 1;  // the next row: odometer over dims 0 … nd − 2
    while (d-- > 0 && ++idx[d] == hi[d])
      idx[d] = lo[d];
    if (d == static_cast<size_t>(-1)) break;
  }
  f(pa, pb, pn);
}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& dir) : dir_(dir), meta_(read_metadata(dir)) {
  try {
    index_slices();
  } catch (const json::exception& e) {
    MT_THROW(DataError, "checkpoint ", dir, ": metadata.json's list of files and slices is malformed (",
             e.what(), ")");
  }
  check_coverage();
}

void CheckpointReader::index_slices() {
  const json& tensors = meta_.at("tensors");
  states_ = meta_.at("states").get<std::vector<std::string>>();
  for (const json& f : meta_.at("files")) {
    if (!f.contains("slices")) continue;
    const std::string file = f.at("name").get<std::string>();
    files_[file] = {f.at("bytes").get<uint64_t>(), f.at("header_crc32c").get<std::string>()};
    for (const json& s : f.at("slices")) {
      Saved saved;
      saved.file = file;
      saved.offsets = s.at("offsets").get<std::vector<int64_t>>();
      saved.shape = s.at("shape").get<std::vector<int64_t>>();
      const std::vector<std::string> crcs = s.at("crc32c").get<std::vector<std::string>>();
      const std::string tensor = s.at("tensor").get<std::string>();
      MT_REQUIRE(crcs.size() == states_.size(), DataError, "checkpoint ", dir_, ": the slice of '", tensor,
                 "' in ", file, " lists ", crcs.size(), " checksums, not ", states_.size(),
                 " (one per state metadata.json lists)");
      saved.crc = crcs;
      saved.checked.assign(crcs.size(), 0);
      MT_REQUIRE(tensors.contains(tensor), DataError, "checkpoint ", dir_, ": ", saved.file,
                 " holds a slice of '", tensor, "', which metadata.json's tensors do not list");
      const std::vector<int64_t> shape = tensors.at(tensor).at("shape").get<std::vector<int64_t>>();
      MT_REQUIRE(inside(saved.offsets, saved.shape, shape), DataError, "checkpoint ", dir_, ": the slice ",
                 box_text(saved.offsets, saved.shape), " of '", tensor, "' in ", saved.file,
                 " is not inside the tensor's shape");
      std::vector<int64_t> lo, hi;
      for (const Saved& other : saved_[tensor])
        MT_REQUIRE(!intersect(saved.offsets, saved.shape, other.offsets, other.shape, lo, hi), DataError,
                   "checkpoint ", dir_, ": the slices ", box_text(other.offsets, other.shape), " (",
                   other.file, ") and ", box_text(saved.offsets, saved.shape), " (", saved.file, ") of '",
                   tensor, "' overlap (a corrupt metadata.json)");
      tensor_bytes_ += 3 * 4 * volume(saved.shape);  // the parameter and its two moments, fp32
      saved_[tensor].push_back(std::move(saved));
    }
  }
}

// Inside and not overlapping (index_slices), the slices tile a tensor exactly
// when their volumes add up to its own.
void CheckpointReader::check_coverage() const {
  for (const auto& [tensor, t] : meta_.at("tensors").items()) {
    const std::vector<int64_t> shape = t.at("shape").get<std::vector<int64_t>>();
    int64_t covered = 0;
    const auto it = saved_.find(tensor);
    if (it != saved_.end())
      for (const Saved& s : it->second)
        covered += volume(s.shape);
    MT_REQUIRE(covered == volume(shape), DataError, "checkpoint ", dir_, ": the saved slices of '", tensor,
               "' cover ", covered, " of its ", volume(shape), " elements (metadata.json leaves a hole)");
  }
}

const SafetensorsFile& CheckpointReader::open(const std::string& file, const std::string& tensor) {
  auto& f = open_[file];
  if (f) return *f;
  const std::string path = (fs::path(dir_) / file).string();
  const FileInfo& info = files_.at(file);
  const std::string reading = " (reading a slice of '" + tensor + "')";
  checked_file_size(path, info.bytes, reading);
  auto opened = std::make_unique<SafetensorsFile>(SafetensorsFile::open(path));
  const std::string crc = crc_hex(crc32c(opened->header_bytes()));
  MT_REQUIRE(crc == info.header_crc, DataError, "checkpoint file ", path, ": CRC32C mismatch in its header (",
             crc, ", metadata.json says ", info.header_crc, "): the file is corrupt", reading);
  f = std::move(opened);
  return *f;
}

void CheckpointReader::verify_slice(const std::string& tensor, Saved& s, size_t state) {
  if (s.checked[state]) return;
  const SafetensorsFile& f = open(s.file, tensor);
  const std::string name = tensor + states_[state];
  MT_REQUIRE(f.has(name) && f.shape(name) == s.shape && f.dtype(name) == "F32", DataError, f.path(),
             ": tensor '", name, "' is missing or has another shape or dtype than metadata.json's slice ",
             box_text(s.offsets, s.shape));
  const std::string_view data = f.raw_bytes(name);
  const std::string crc = crc_hex(crc32c(data));
  bytes_checked_ += static_cast<int64_t>(data.size());
  MT_REQUIRE(crc == s.crc[state], DataError, "checkpoint file ", f.path(), ": CRC32C mismatch in '", name,
             "' (the slice ", box_text(s.offsets, s.shape), " of tensor '", tensor, "': ", crc,
             ", metadata.json says ", s.crc[state], "): the file is corrupt");
  s.checked[state] = 1;
}

size_t CheckpointReader::state_of(const std::string& suffix) const {
  for (size_t k = 0; k < states_.size(); ++k)
    if (suffix == states_[k]) return k;
  MT_THROW(DataError, "checkpoint ", dir_, " holds no '", suffix,
           "' state (its states: ", json(states_).dump(), "): it was saved with another optimizer");
}

void CheckpointReader::verify_box(const std::string& tensor, const std::string& suffix,
                                  const std::vector<int64_t>& offsets, const std::vector<int64_t>& size) {
  if (volume(size) == 0) return;
  const size_t state = state_of(suffix);
  std::vector<int64_t> lo, hi;
  for (Saved& s : saved_[tensor])
    if (s.shape.size() == size.size() && intersect(offsets, size, s.offsets, s.shape, lo, hi))
      verify_slice(tensor, s, state);
}

void CheckpointReader::verify_all() {
  for (auto& [tensor, slices] : saved_)
    for (Saved& s : slices)
      for (size_t k = 0; k < states_.size(); ++k)
        verify_slice(tensor, s, k);
}

void CheckpointReader::read_box(const std::string& tensor, const std::string& suffix,
                                const std::vector<int64_t>& offsets, const std::vector<int64_t>& size,
                                float* box) {
  const int64_t want = volume(size);
  if (want == 0) return;
  verify_box(tensor, suffix, offsets, size);
  int64_t covered = 0;
  std::vector<int64_t> lo, hi;
  for (const Saved& s : saved_[tensor]) {
    if (s.shape.size() != size.size() || !intersect(offsets, size, s.offsets, s.shape, lo, hi)) continue;
    const SafetensorsFile& f = open(s.file, tensor);
    const std::string name = tensor + suffix;
    for_each_run(s.offsets, s.shape, offsets, size, lo, hi, [&](int64_t in_file, int64_t in_box, int64_t n) {
      f.read_f32_range(name, in_file, n, box + in_box);
      bytes_read_ += 4 * n;
      covered += n;
    });
  }
  // The constructor found no hole; a box outside the tensor would leave one.
  MT_REQUIRE(covered == want, DataError, "checkpoint ", dir_, ": the saved slices of '", tensor, "' cover ",
             covered, " of the ", want, " elements of ", box_text(offsets, size), " this rank needs");
}

ModelConfig checkpoint_model_config(const json& meta, const std::string& dir) {
  Config c;
  for (const auto& [key, value] : meta.at("config").items()) {
    if (key.rfind("model.", 0) != 0) continue;
    try {
      config_set(c, key, value.get<std::string>());
    } catch (const std::exception& e) {
      MT_THROW(DataError, "checkpoint ", dir, ": metadata.json's config has ", key, " = ", value.dump(), " (",
               e.what(), ")");
    }
  }
  return c.model;
}

bool is_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  return fs::exists(fs::path(dir) / "metadata.json", ec);
}

void read_chunk_slices(CheckpointReader& reader, Llama& chunk, const MeshSizes& sizes,
                       const MeshCoords& coords, const std::vector<StateTarget>& targets) {
  std::vector<float> box;
  for (const LocalSlice& s : local_slices(chunk, sizes, coords)) {
    if (s.numel() == 0) continue;  // an all-padding piece: nothing saved, nothing to read
    box.resize(static_cast<size_t>(s.numel()));
    for (const StateTarget& t : targets) {
      reader.read_box(s.tensor, t.suffix, s.offsets, s.size, box.data());
      box_to_slice(s, box.data(), t.buffer);
    }
  }
}

void verify_chunk_slices(CheckpointReader& reader, Llama& chunk, const MeshSizes& sizes,
                         const MeshCoords& coords, const std::vector<std::string>& suffixes) {
  for (const LocalSlice& s : local_slices(chunk, sizes, coords))
    for (const std::string& suffix : suffixes)
      reader.verify_box(s.tensor, suffix, s.offsets, s.size);
}

void load_checkpoint_params(CheckpointReader& reader, Llama& chunk, const MeshSizes& sizes,
                            const MeshCoords& coords) {
  read_chunk_slices(reader, chunk, sizes, coords, {{"", chunk.store().local_params()}});
  chunk.store().after_update();  // zero 1/2: all-gather the loaded shards into the full parameters
}

CheckpointModel read_checkpoint_model(const std::string& dir) {
  verify_checkpoint(dir);
  CheckpointReader reader(dir);
  reader.verify_all();  // every slice and state, though only the parameters are written out
  const ModelConfig cfg = checkpoint_model_config(reader.metadata(), dir);
  const ParamTable table = make_param_table(cfg);
  const json& tensors = reader.metadata().at("tensors");
  std::vector<float> full(static_cast<size_t>(table.total));
  for (const ParamSpec& s : table.specs) {
    MT_REQUIRE(tensors.contains(s.name) && tensors.at(s.name).at("shape") == json(s.global_shape), DataError,
               "checkpoint ", dir, ": metadata.json's tensor '", s.name,
               "' is missing or does not have the shape its model config gives");
    reader.read_box(s.name, "", std::vector<int64_t>(s.global_shape.size(), 0), s.global_shape,
                    full.data() + s.offset);
  }
  return {cfg, std::move(full)};
}

}  // namespace mt

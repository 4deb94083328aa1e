// Reading a checkpoint back into the same layout (train/checkpoint.h).
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/file.h"
#include "train/checkpoint.h"
#include "train/checkpoint_meta.h"
#include "train/checkpoint_slices.h"

namespace mt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// Which file holds each saved slice, by tensor and global box.
class SliceIndex {
 public:
  SliceIndex(const std::string& dir, const json& files) : dir_(dir) {
    for (const json& f : files) {
      if (!f.contains("slices")) continue;
      for (const json& s : f.at("slices"))
        where_[key(s.at("tensor").get<std::string>(), s.at("offsets").get<std::vector<int64_t>>(),
                   s.at("shape").get<std::vector<int64_t>>())] = f.at("name").get<std::string>();
    }
  }

  // The file holding `slice`'s box; DataError naming it when none does.
  const SafetensorsFile& file_of(const LocalSlice& slice) {
    const auto it = where_.find(key(slice.tensor, slice.offsets, slice.size));
    MT_REQUIRE(it != where_.end(), DataError, "checkpoint ", dir_, ": no file holds the slice of '",
               slice.tensor, "' this rank needs (metadata.json lists none at these offsets)");
    auto& open = open_[it->second];
    if (!open)
      open = std::make_unique<SafetensorsFile>(SafetensorsFile::open((fs::path(dir_) / it->second).string()));
    return *open;
  }

 private:
  static std::string key(const std::string& tensor, const std::vector<int64_t>& offsets,
                         const std::vector<int64_t>& size) {
    return json({tensor, offsets, size}).dump();
  }
  std::string dir_;
  std::map<std::string, std::string> where_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

void load_chunk(SliceIndex& index, Llama& chunk, AdamW& optim, const MeshSizes& sizes,
                const MeshCoords& coords) {
  ParamStore& store = chunk.store();
  float* targets[3] = {store.local_params(), optim.m_data(),
                       optim.v_data()};  // zero 1/2: a copy of the shard
  std::vector<float> box;
  for (const LocalSlice& s : local_slices(chunk, sizes, coords)) {
    if (s.numel() == 0) continue;  // an all-padding piece: nothing saved, nothing to read
    const SafetensorsFile& f = index.file_of(s);
    box.resize(static_cast<size_t>(s.numel()));
    for (int k = 0; k < 3; ++k) {
      const std::string name = s.tensor + kStateSuffix[k];
      MT_REQUIRE(f.has(name) && f.shape(name) == s.size, DataError, f.path(), ": tensor '", name,
                 "' is missing or has another shape than metadata.json says");
      f.read_f32(name, box.data(), s.numel());
      box_to_slice(s, box.data(), targets[k]);
    }
  }
  store.after_update();  // zero 1/2: all-gather the loaded shards into the full parameters
}

}  // namespace

ResumeState load_checkpoint(const std::string& dir, TrainModel& model, const RunMesh& mesh) {
  const json meta = read_metadata(dir);
  SliceIndex index(dir, meta.at("files"));
  for (size_t c = 0; c < model.chunks.size(); ++c) {
    load_chunk(index, *model.chunks[c], *model.optims[c], run_sizes(mesh), run_coords(mesh));
    model.optims[c]->set_steps_taken(meta.at("adam_steps").get<int64_t>());
  }
  ResumeState r;
  r.step = meta.at("step").get<int64_t>();
  r.bad_steps = meta.at("bad_steps").get<int64_t>();
  model.bad_steps = r.bad_steps;
  std::string metrics = read_file((fs::path(dir) / "metrics.jsonl").string());
  size_t begin = 0;
  for (size_t end; (end = metrics.find('\n', begin)) != std::string::npos; begin = end + 1)
    r.metrics_lines.push_back(metrics.substr(begin, end - begin));
  return r;
}

}  // namespace mt

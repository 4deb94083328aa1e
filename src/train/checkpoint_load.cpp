// Resuming from a checkpoint, into any layout (train/checkpoint.h).
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/file.h"
#include "train/checkpoint.h"
#include "train/checkpoint_meta.h"
#include "train/checkpoint_read.h"
#include "train/checkpoint_slices.h"

namespace mt {

namespace fs = std::filesystem;
using nlohmann::json;

ResumeState load_checkpoint(const std::string& dir, TrainModel& model, const RunMesh& mesh) {
  CheckpointReader reader(dir);
  const json& meta = reader.metadata();
  for (size_t c = 0; c < model.chunks.size(); ++c) {
    Llama& chunk = *model.chunks[c];
    Optimizer& optim = *model.optims[c];
    // Each slice this rank's layout holds, from whichever saved slices cover it.
    std::vector<StateTarget> targets = {{"", chunk.store().local_params()}};
    for (int k = 0; k < optim.state_count(); ++k)
      targets.push_back({optim.state_suffix(k), optim.state_data(k)});
    read_chunk_slices(reader, chunk, run_sizes(mesh), run_coords(mesh), targets);
    chunk.store().after_update();  // zero 1/2: all-gather the loaded shards into the full parameters
    optim.set_steps_taken(meta.at("adam_steps").get<int64_t>());
  }
  ResumeState r;
  r.bytes_read = reader.bytes_read();
  r.tensor_bytes = reader.tensor_bytes();
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

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
    AdamW& optim = *model.optims[c];
    // Each slice this rank's layout holds, from whichever saved slices cover it.
    read_chunk_slices(reader, chunk, run_sizes(mesh), run_coords(mesh),
                      {chunk.store().local_params(), optim.m_data(), optim.v_data()});
    chunk.store().after_update();  // zero 1/2: all-gather the loaded shards into the full parameters
    optim.set_steps_taken(meta.at("adam_steps").get<int64_t>());
  }
  ResumeState r;
  r.bytes_read = reader.bytes_read();
  r.tensor_bytes = reader.tensor_bytes();
  r.step = meta.at("step").get<int64_t>();
  r.bad_steps = meta.at("bad_steps").get<int64_t>();
  model.bad_steps = r.bad_steps;
  for (const auto& chunk : model.chunks) {  // aux-loss-free balancing: the saved bias of each MoE layer
    for (int64_t layer : chunk->moe_stats().layers) {
      if (chunk->router_bias_of_layer(layer) == nullptr) continue;
      const json& saved = meta.value("router_bias", json::object());
      MT_REQUIRE(saved.contains(std::to_string(layer)), DataError, "checkpoint ", dir,
                 ": no router bias of layer ", layer, " (saved without model.router_bias_rate?)");
      chunk->set_router_bias_of_layer(layer, saved.at(std::to_string(layer)).get<std::vector<float>>());
    }
  }
  std::string metrics = read_file((fs::path(dir) / "metrics.jsonl").string());
  size_t begin = 0;
  for (size_t end; (end = metrics.find('\n', begin)) != std::string::npos; begin = end + 1)
    r.metrics_lines.push_back(metrics.substr(begin, end - begin));
  return r;
}

}  // namespace mt

// Resuming from a checkpoint, into any layout (ckpt/checkpoint.h).
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>

#include "ckpt/checkpoint.h"
#include "ckpt/checkpoint_meta.h"
#include "ckpt/checkpoint_read.h"
#include "ckpt/checkpoint_slices.h"
#include "comm/runtime.h"
#include "core/error.h"
#include "core/file.h"

namespace mt {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// This rank's check of the slices its layout will read from `dir`, every
// state (parameters and the optimizer's): the reader (its slices verified) or, in `why`, the reason not.
std::unique_ptr<CheckpointReader> verify_my_slices(const std::string& dir, TrainModel& model,
                                                   const RunMesh& mesh, std::string& why) {
  try {
    auto reader = std::make_unique<CheckpointReader>(dir);
    for (const auto& chunk : model.chunks)
      verify_chunk_slices(*reader, *chunk, run_sizes(mesh), run_coords(mesh), checkpoint_states(model));
    why.clear();
    return reader;
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

// Over the world: the lowest rank with a reason in `why`, or −1 when none has.
int lowest_failing(const std::string& why, const RunMesh& mesh) {
  int64_t flag = why.empty() ? 0 : mesh.world_size - mesh.rank;
  if (mesh.world() != nullptr)
    mesh.world()->all_reduce(&flag, 1, ElemType::i64, ReduceOp::max, "resume: checkpoint verdicts");
  return flag == 0 ? -1 : static_cast<int>(mesh.world_size - flag);
}

// An error on some ranks before training: one message, every rank exits 1
// (comm/runtime.h agree_on_startup_errors); one process: a DataError.
void agree(const RunMesh& mesh, const std::string& why) {
  if (mesh.world() == nullptr) {
    MT_REQUIRE(why.empty(), DataError, why);
    return;
  }
  agree_on_startup_errors(*mesh.world(), why.empty() ? std::nullopt : std::optional<std::string>(why));
}

}  // namespace

std::unique_ptr<CheckpointReader> open_resume(const std::string& resume, std::string dir, const Config& cfg,
                                              TrainModel& model, const RunMesh& mesh) {
  for (bool first = true; !dir.empty(); first = false) {
    std::string why;
    if (!first) {  // a fallback: the run's checks, as validate_run made them on the first
      try {
        check_resume(dir, cfg, mesh.world_size);
      } catch (const Error& e) {
        why = e.what();
      }
      agree(mesh, why);  // the same on every rank: a function of the files and the config
    }
    std::unique_ptr<CheckpointReader> reader = verify_my_slices(dir, model, mesh, why);
    if (resume != "auto") {
      agree(mesh, why);
      return reader;
    }
    const int failing = lowest_failing(why, mesh);
    if (failing < 0) return reader;
    if (mesh.rank == failing)
      std::fprintf(stderr,
                   "meshtrain: warning: --resume auto: checkpoint %s is not usable: %s (found by rank %d); "
                   "falling back to the previous complete checkpoint\n",
                   dir.c_str(), why.c_str(), failing);
    const ResumeChoice next =
        resolve_resume("auto", cfg.train.checkpoint_dir, checkpoint_step(fs::path(dir).filename().string()));
    for (const std::string& w : next.warnings)
      if (mesh.rank == 0) std::fprintf(stderr, "meshtrain: warning: %s\n", w.c_str());
    dir = next.dir;
  }
  return nullptr;
}

ResumeState load_checkpoint(CheckpointReader& reader, TrainModel& model, const RunMesh& mesh) {
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
  r.bytes_checked = reader.bytes_checked();
  r.tensor_bytes = reader.tensor_bytes();
  r.step = meta.at("step").get<int64_t>();
  r.bad_steps = meta.at("bad_steps").get<int64_t>();
  model.bad_steps = r.bad_steps;
  for (const auto& chunk : model.chunks) {  // aux-loss-free balancing: the saved bias of each MoE layer
    for (int64_t layer : chunk->moe_stats().layers) {
      if (chunk->router_bias_of_layer(layer) == nullptr) continue;
      const json& saved = meta.value("router_bias", json::object());
      MT_REQUIRE(saved.contains(std::to_string(layer)), DataError, "checkpoint ", reader.dir(),
                 ": no router bias of layer ", layer, " (saved without model.router_bias_rate?)");
      chunk->set_router_bias_of_layer(layer, saved.at(std::to_string(layer)).get<std::vector<float>>());
    }
  }
  std::string metrics =
      read_file((fs::path(reader.dir()) / "metrics.jsonl").string(), kMaxTextFile, "checkpoint file");
  size_t begin = 0;
  for (size_t end; (end = metrics.find('\n', begin)) != std::string::npos; begin = end + 1)
    r.metrics_lines.push_back(metrics.substr(begin, end - begin));
  return r;
}

}  // namespace mt

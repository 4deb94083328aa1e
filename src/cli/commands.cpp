#include "cli/commands.h"

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "ckpt/checkpoint.h"
#include "comm/context.h"
#include "comm/runtime.h"
#include "config/config.h"
#include "core/error.h"
#include "core/threads.h"
#include "cost/memory_estimate.h"
#include "data/prepare.h"
#include "data/token_file.h"
#include "data/tokenizer.h"
#include "mesh/mesh.h"
#include "mesh/placement.h"
#include "pipeline/render.h"
#include "pipeline/schedule.h"
#include "pipeline/simulate.h"
#include "train/evaluate.h"
#include "train/model_io.h"
#include "train/preempt.h"
#include "train/run_mesh.h"

namespace mt {

int run_train_command(const TrainArgs& a) {
  std::vector<std::string> overrides = a.overrides;
  auto shorthand = [&](const char* key, const std::optional<int64_t>& v) {
    if (v) overrides.push_back(std::string(key) + "=" + std::to_string(*v));
  };
  shorthand("parallel.dp", a.dp);
  shorthand("parallel.tp", a.tp);
  shorthand("parallel.pp", a.pp);
  shorthand("parallel.cp", a.cp);
  shorthand("parallel.zero", a.zero);
  CommRuntime runtime(nullptr, nullptr);
  Group world = runtime.world();
  // Start-up validation on every rank; one message, every rank exits 1.
  std::optional<std::string> error;
  Config cfg;
  std::vector<std::string> init_notices;
  RunOptions run = a.run;
  run.local_ranks = runtime.local_ranks();
  RankPlacement placement;
  try {
    placement = parse_placement(a.placement);
    cfg = load_config(a.config, overrides);
    init_notices = validate_run(cfg, run, world.size(), world.rank());  // also resolves --resume
  } catch (...) {
    int status = 1;
    error = describe_current_exception(&status);
  }
  // Without checkpoints a stop signal keeps its default effect (main installed the handlers first).
  if (cfg.train.checkpoint_dir.empty()) release_stop_handlers();
  agree_on_startup_errors(world, error);
  // From here on the world is in mesh order (placement.h): its rank r holds mesh position r.
  const std::vector<int> positions =
      mesh_positions(runtime.nodes().node_of_rank, placement, mesh_sizes(cfg.parallel));
  world = place_world(world, positions);
  if (world.rank() == 0) {  // keys the user set that this layout ignores: say so rather than stay silent
    for (const std::string& note : ineffective_keys(cfg))
      std::fprintf(stderr, "meshtrain: note: %s\n", note.c_str());
  }
  world.context().timeout_s = cfg.parallel.timeout_s;
  for (const std::string& n : init_notices)
    if (world.rank() == 0) std::fprintf(stderr, "meshtrain: notice: %s\n", n.c_str());
  run.mesh_printed = a.print_mesh;
  if (a.print_mesh && world.rank() == 0) {
    const MeshSizes sizes = mesh_sizes(cfg.parallel);
    const NodeMap& nodes = runtime.nodes();
    std::printf(
        "%s%s", DeviceMesh::table(sizes).c_str(),
        mesh_node_table(sizes, positions, nodes.node_of_rank, nodes.names, static_cast<int>(cfg.parallel.ep))
            .c_str());
    std::printf("%s", hsdp_table(sizes, static_cast<int>(cfg.parallel.dp_shard)).c_str());
    if (cfg.parsed().dp_allreduce == DpAllReduce::hierarchical)
      std::printf("%s", hierarchical_dp_table(sizes, positions, nodes.node_of_rank, nodes.names).c_str());
    if (cfg.parsed().cp_impl == cp::CpImpl::hybrid)
      std::printf("%s", hybrid_cp_table(sizes, static_cast<int>(cfg.parallel.cp_ulysses)).c_str());
  }
  RunResult r;
  try {
    r = run_training(cfg, run, &world);
  } catch (...) {  // any exception, ours or not: ends every rank, non-zero, with its message
    int status = 1;
    const std::string message = describe_current_exception(&status);
    abort_job(world, message, status);
  }
  if (a.run.profile && world.rank() == 0) {
    double total = 0;
    for (const auto& [name, sec] : r.kernel_seconds)
      total += sec;
    std::printf("time per kernel (forward + backward, all steps):\n");
    for (const auto& [name, sec] : r.kernel_seconds) {
      std::printf("  %-14s %8.3f s  %5.1f%%\n", name.c_str(), sec, total > 0 ? 100 * sec / total : 0.0);
    }
  }
  return 0;
}

int run_prepare_command(const PrepareArgs& a) {
  PrepareOptions o;
  o.text_paths = a.text;
  if (o.text_paths.empty()) {
    require_default_corpus();
    o.text_paths = default_corpus_paths();
  }
  o.out_dir = a.out;
  MT_REQUIRE(a.vocab_size >= 1 && a.vocab_size <= INT32_MAX, ConfigError, "--vocab-size (", a.vocab_size,
             ") must be between 1 and ", INT32_MAX);
  o.vocab_size = static_cast<int>(a.vocab_size);
  const PrepareResult r = prepare_dataset(o);
  std::printf("wrote %s: vocabulary %lld, %lld train tokens, %lld validation tokens\n", a.out.c_str(),
              static_cast<long long>(r.vocab_size), static_cast<long long>(r.train_tokens),
              static_cast<long long>(r.val_tokens));
  return 0;
}

int run_schedule_command(const ScheduleArgs& a) {
  // Bounds first, so that the casts below are exact and the grid fits a screen or a file.
  constexpr int64_t kMax = 1024;
  for (const auto& [name, value] :
       {std::pair{"--pp", a.pp}, {"--microbatches", a.microbatches}, {"--v", a.v}}) {
    MT_REQUIRE(value >= 1 && value <= kMax, ConfigError, name, " (", value, ") must be between 1 and ", kMax);
  }
  const pp::Schedule s = pp::make_schedule(pp::parse_schedule_kind(a.kind), static_cast<int>(a.pp),
                                           static_cast<int>(a.v), static_cast<int>(a.microbatches));
  const pp::SimResult r = pp::simulate(s);
  MT_CHECK(r.ok, r.error);
  std::fputs(pp::render_grid(s, r).c_str(), stdout);
  return 0;
}

int run_export_command(const ExportArgs& a) {
  export_checkpoint(a.checkpoint, a.out);
  std::printf("exported %s to %s\n", a.checkpoint.c_str(), a.out.c_str());
  return 0;
}

}  // namespace mt

#include "train/train_model.h"

#include <algorithm>
#include <cstdio>

#include "ckpt/checkpoint_read.h"
#include "model/params.h"
#include "parallel/canonical_store.h"
#include "parallel/context_parallel.h"
#include "parallel/data_parallel.h"
#include "parallel/local_store.h"
#include "parallel/store_sharding.h"
#include "pipeline/stages.h"
#include "train/model_io.h"

namespace mt {

std::string stage_map(const std::vector<StageRange>& stages, int pp) {
  std::string out;
  for (size_t k = 0; k < stages.size(); ++k) {
    const StageRange& s = stages[k];
    char buf[256];
    std::snprintf(buf, sizeof buf, "  stage %zu (pp rank %zu, chunk %zu): %s%lld layers %lld-%lld%s\n", k,
                  k % static_cast<size_t>(pp), k / static_cast<size_t>(pp), s.embed ? "embedding + " : "",
                  static_cast<long long>(s.end_layer - s.first_layer), static_cast<long long>(s.first_layer),
                  static_cast<long long>(s.end_layer - 1), s.head ? " + final norm, LM head, loss" : "");
    out += buf;
  }
  return out;
}

std::vector<Llama*> TrainModel::chunk_ptrs() const {
  std::vector<Llama*> out;
  for (const auto& c : chunks)
    out.push_back(c.get());
  return out;
}

namespace {

// The store of one chunk under the layout (null: the model's own LocalStore);
// its group is the dp × cp group. In the canonical mode (parallel/canonical.h)
// it is wrapped in a CanonicalStore and sums over dp by the canonical tree.
std::unique_ptr<ParamStore> make_store(const Config& cfg, const RunMesh& mesh, const StageRange& stage) {
  const int zero = static_cast<int>(cfg.parallel.zero);
  const bool canonical = cfg.parsed().reduction == Reduction::canonical;
  const bool sharded = mesh.dp_cp_group() && store_sharding(mesh.dp, mesh.cp, zero).group != 0;
  if (!sharded && !canonical) return nullptr;
  const EpRank ep = mesh.ep > 1 ? EpRank{mesh.ep, mesh.ep_rank, mesh.cp} : EpRank{};
  const ParamTable table = make_param_table(cfg.model, {mesh.tp, mesh.tp_rank}, stage, ep,
                                            mesh.grid);  // this rank's tp shard and experts of the stage
  std::vector<UnitSpec> units = make_units(table, cfg.model);
  std::unique_ptr<ParamStore> store;
  if (sharded) {
    DataParallelOptions o;
    o.zero = zero;
    o.bucket_bytes = static_cast<int64_t>(cfg.parallel.bucket_mb * (1 << 20));
    o.ep = mesh.ep_group();
    o.expert_replicas = mesh.expert_replica_group();
    o.order = canonical ? SumOrder::tree : SumOrder::library;
    o.shard = mesh.shard_group();  // HSDP; null: flat ZeRO
    o.replicas = mesh.replica_group();
    o.dp_shard = mesh.dp_shard;
    o.nodes = mesh.dp_nodes();  // parallel.dp_allreduce = hierarchical; null: flat
    store = std::make_unique<DataParallelStore>(units, *mesh.dp_cp_group(), o);
  } else {
    store = std::make_unique<LocalStore>(units);
  }
  if (canonical)  // the store's group sums a tied head's gradient apart (canonical_store.h)
    store = std::make_unique<CanonicalStore>(std::move(store), std::move(units),
                                             sharded ? mesh.dp_cp_group() : nullptr);
  return store;
}

// The pieces of `m`'s local share, for LAMB's per-tensor norms: each parameter
// of the chunk is tensor i (its order in the chunk's units, the same on every
// rank that holds pieces of the chunk), what lies between them is padding.
std::vector<TensorPiece> tensor_pieces(Llama& m, int64_t* n_tensors) {
  ParamStore& st = m.store();
  std::vector<TensorPiece> pieces;
  int64_t i = 0;
  for (const UnitSpec& u : m.units()) {
    for (const ParamSlot& p : u.params) {
      int64_t n = 0;
      const float* at = st.local_param_of(p.name, &n);
      if (n > 0) pieces.push_back({at - st.local_params(), n, i, p.norm_counted});
      ++i;
    }
  }
  *n_tensors = i;
  std::sort(pieces.begin(), pieces.end(),
            [](const TensorPiece& a, const TensorPiece& b) { return a.offset < b.offset; });
  std::vector<TensorPiece> tiled;
  int64_t at = 0;
  for (const TensorPiece& p : pieces) {
    if (p.offset > at) tiled.push_back({at, p.offset - at, -1, false});
    tiled.push_back(p);
    at = p.offset + p.numel;
  }
  if (at < st.local_numel()) tiled.push_back({at, st.local_numel() - at, -1, false});
  return tiled;
}

std::unique_ptr<Optimizer> make_optimizer(const Config& cfg, Llama& m) {
  const TrainConfig& tc = cfg.train;
  OptimizerOptions o;
  o.kind = cfg.parsed().optimizer;
  o.exact_norms = cfg.parsed().reduction == Reduction::canonical;
  o.adam = {tc.beta1, tc.beta2, tc.adam_eps, tc.weight_decay};
  o.momentum = tc.momentum;
  o.nesterov = tc.nesterov;
  ParamStore& st = m.store();
  int64_t n_tensors = 0;
  std::vector<TensorPiece> pieces;
  if (o.kind == OptimizerKind::lamb) pieces = tensor_pieces(m, &n_tensors);
  return std::make_unique<Optimizer>(st.local_numel(), o, st.local_decay_ranges(), std::move(pieces),
                                     n_tensors);
}

ModelOptions model_options(const Config& cfg, const RunOptions& opts, const RunMesh& mesh) {
  ModelOptions mo;
  mo.max_batch = cfg.train.microbatch_size;
  mo.max_seq = cfg.train.seq_len / mesh.cp;  // this rank's tokens of each sequence
  mo.cp_impl = cfg.parsed().cp_impl;
  mo.recompute = cfg.parsed().recompute;
  mo.profile = opts.profile;
  mo.mesh = mesh.view();
  mo.grid = mesh.grid;
  mo.sp = cfg.parallel.sp && mesh.tp > 1;
  mo.tp_overlap = cfg.parallel.tp_overlap && mesh.tp > 1;
  mo.moe_groups = mesh.dp;
  mo.canonical = cfg.parsed().reduction == Reduction::canonical;
  if (cfg.parsed().reduction == Reduction::canonical && cfg.parallel.canonical_tp > 1)
    mo.canonical_tp = cfg.parallel.canonical_tp;
  if (cfg.parsed().reduction == Reduction::canonical && cfg.parallel.canonical_cp > 1)
    mo.canonical_cp = cfg.parallel.canonical_cp;
  if (cfg.parsed().reduction == Reduction::canonical && cfg.parallel.canonical_tp_d > 1)
    mo.canonical_tp_d = cfg.parallel.canonical_tp_d;
  return mo;
}

}  // namespace

TrainModel make_train_model(const Config& cfg, const RunOptions& opts, const RunMesh& mesh) {
  const TrainConfig& tc = cfg.train;
  const int v = static_cast<int>(cfg.parallel.virtual_stages);
  TrainModel t;
  if (mesh.pp * v > 1)
    t.stages = split_stages(cfg.parsed().stage_layers);
  else
    t.stages = {StageRange{}};
  ModelOptions mo = model_options(cfg, opts, mesh);
  mo.split_backward = t.pipelined() && pp::split_backward(cfg.parsed().schedule);  // zbh1: B and W apart
  if (!opts.fingerprint_path.empty()) t.fingerprint = std::make_unique<Fingerprint>(cfg, mesh.rank);
  mo.probe = t.fingerprint.get();
  std::unique_ptr<CheckpointReader> checkpoint;  // --init-from of a checkpoint directory
  if (!opts.init_from.empty() && is_checkpoint_dir(opts.init_from))
    checkpoint = std::make_unique<CheckpointReader>(opts.init_from);
  for (int c = 0; c < v; ++c) {
    mo.stage = t.stages[static_cast<size_t>(c * mesh.pp + mesh.pp_rank)];
    t.chunks.push_back(std::make_unique<Llama>(cfg.model, mo, make_store(cfg, mesh, mo.stage)));
    Llama& m = *t.chunks.back();
    if (checkpoint)
      load_checkpoint_params(*checkpoint, m, run_sizes(mesh), run_coords(mesh));  // weights only, any layout
    else if (opts.init_from.empty())
      m.init(tc.seed);
    else
      load_model_dir(opts.init_from, m);
    ParamStore& st = m.store();
    t.optims.push_back(make_optimizer(cfg, m));
    if (cfg.model.tie_embeddings && (m.has_embed() || m.has_head())) t.tied_store = &st;
  }
  const int microbatches = static_cast<int>(tc.batch_size / (mesh.dp * tc.microbatch_size));
  pp::Schedule schedule = t.pipelined() ? pp::make_schedule(cfg.parsed().schedule, mesh.pp, v, microbatches)
                                        : pp::one_stage_schedule(microbatches);
  std::vector<pp::Stage*> stages;
  for (auto& c : t.chunks)
    stages.push_back(c.get());
  t.executor = std::make_unique<pp::Executor>(std::move(schedule), mesh.pp_rank, mesh.pp_group(), stages,
                                              tc.microbatch_size, tc.seq_len / mesh.cp);
  t.executor->set_first_row(mesh.dp_rank * (tc.batch_size / mesh.dp));  // shard_batch's rows of this rank
  return t;
}

}  // namespace mt

#include "cost/memory_model.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "cost/memory_model_parts.h"
#include "model/params.h"
#include "model/stage_split.h"
#include "parallel/canonical_store.h"
#include "parallel/data_parallel.h"
#include "parallel/expert_canonical.h"
#include "parallel/store_plan.h"
#include "parallel/store_sharding.h"
#include "parallel/tp2d.h"
#include "pipeline/executor.h"

namespace mt {

RankCoords mesh_coords(const ParallelConfig& p, int64_t rank) {
  RankCoords c;
  c.tp = rank % p.tp;
  c.cp = rank / p.tp % p.cp;
  c.pp = rank / (p.tp * p.cp) % p.pp;
  c.dp = rank / (p.tp * p.cp * p.pp);
  c.ep = (c.dp * p.cp + c.cp) % std::max<int64_t>(1, p.ep);  // run_mesh.cpp: the flattened (dp, cp) index
  return c;
}

int64_t RankMemory::total() const {
  int64_t t = 0;
  for (const int64_t b : upper)
    t += b;
  return t;
}

namespace {

// The canonical mode under ep: each MoE layer of the stage keeps a pool of
// leaves of its local experts' size (ep::ExpertLeaves::buffers_for).
int64_t expert_leaf_floats(const Config& cfg, const StageRange& stage, const std::vector<int64_t>& order) {
  const ModelConfig& m = cfg.model;
  const int64_t end = stage.end_layer < 0 ? m.n_layers : stage.end_layer;
  int64_t layers = 0;
  for (int64_t l = stage.first_layer; l < end; ++l)
    layers += m.is_moe_layer(l) ? 1 : 0;
  const int64_t ep = cfg.parallel.ep;
  return layers * ep::ExpertLeaves::buffers_for(order, ep) * (m.n_experts / ep) * 3 * m.expert_hidden() *
         m.d_model;
}

}  // namespace

namespace {

constexpr int64_t kFloat = 4;

// Floats per kind, the model's peak (lo) and the largest it allows (hi).
struct Floats {
  std::array<int64_t, kNumMemKinds> lo{}, hi{};
  void add(MemKind k, int64_t f) { add(k, f, f); }
  void add(MemKind k, int64_t l, int64_t h) {
    lo[static_cast<size_t>(k)] += l;
    hi[static_cast<size_t>(k)] += h;
  }
};

// A chunk's parameters, gradients, ZeRO buffers (the store's own plan,
// parallel/store_plan.h, for the store the trainer gives it) and optimizer
// state (the optimizer's states over what the store updates).
void add_store(const Config& cfg, const ParamTable& table, const std::vector<UnitSpec>& units, Floats& f) {
  const ParallelConfig& p = cfg.parallel;
  const int z = static_cast<int>(p.zero);
  const int P = static_cast<int>(p.dp * p.cp);
  StoreShape shape;
  // HSDP: ZeRO's shards over a shard group of dp_shard × cp ranks.
  const int shards = static_cast<int>(shard_group_dp(p.dp_shard, p.dp) * p.cp);
  shape.group = store_sharding(p.dp, p.cp, z, p.dp_shard).group == 0 ? 0 : shards;
  shape.replicas = p.ep > 1 && z > 0 ? P / static_cast<int>(p.ep) : 0;  // the experts' replica group
  shape.zero = z;
  if (cfg.parsed().dp_allreduce == DpAllReduce::hierarchical) {  // g ranks per node: 1 to the whole group
    shape.node_ranks = {1, P};
    shape.bucket_bytes = static_cast<int64_t>(p.bucket_mb * (1 << 20));
  }
  const bool tied_here = table.embed_unit >= 0 && table.lm_head >= 0 && table.lm_head == table.embed;
  // The canonical mode keeps a tied head's gradient apart (parallel/canonical_store.h): the store
  // then never holds the embedding's gradient through the backward.
  const bool apart = cfg.parsed().reduction == Reduction::canonical;
  shape.tied_unit = tied_here && !apart ? table.embed_unit : -1;
  const StorePlan plan = store_plan(units, shape);
  for (const StoreBuffer& b : plan.buffers)
    f.add(b.kind, b.least, b.most);
  f.add(MemKind::optim, memory_model::optimizer_states(cfg) * plan.local_numel);
}

// The pipeline's transfer buffers, each one residual (the buffer plan's
// entry): the executor's own transfer plan for this rank's actions.
void add_pipeline(const Config& cfg, const pp::Schedule& s, int64_t pp_rank, int64_t residual, Floats& f) {
  const ParallelConfig& p = cfg.parallel;
  if (p.pp * p.virtual_stages <= 1) return;
  const pp::Executor::TransferPlan t = pp::Executor::transfer_plan(s.ranks[static_cast<size_t>(pp_rank)]);
  f.add(MemKind::comm, (t.recvs + t.least_sends) * residual, (t.recvs + t.most_sends) * residual);
}

// The microbatches of chunk k's backwards on pp rank `pp_rank`, in the order the schedule runs them.
std::vector<int64_t> backward_order(const pp::Schedule& s, int64_t pp_rank, int k) {
  std::vector<int64_t> order;
  for (const pp::Action& a : s.ranks[static_cast<size_t>(pp_rank)])
    if (a.op == s.grad_op() && s.chunk_of(a.vstage) == k) order.push_back(a.microbatch);  // the store's order
  return order;
}

// A chunk's store (add_store) depends on its layers' kinds, whether it holds
// the embedding and the head, and the tp and ep coordinates — not on which
// layers it holds: stages of the same shape share one entry, so that a model
// of many stages builds each parameter table once (the planner asks for
// thousands of layouts of 96-layer models).
using StoreCache = std::map<std::string, Floats>;

const Floats& chunk_store(const Config& cfg, const StageRange& stage, TpRank tp, const tp2d::Grid& grid,
                          const EpRank& ep, StoreCache& cache) {
  const ModelConfig& m = cfg.model;
  std::string key = std::to_string(tp.rank) + "," + std::to_string(ep.rank) + (stage.embed ? "E" : "-") +
                    (stage.head ? "H" : "-");
  const int64_t end = stage.end_layer < 0 ? m.n_layers : stage.end_layer;
  for (int64_t l = stage.first_layer; l < end; ++l)
    key += m.is_moe_layer(l) ? 'm' : 'd';
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  const ParamTable table = make_param_table(m, tp, stage, ep, grid);
  Floats f;
  add_store(cfg, table, make_units(table, m), f);
  return cache.emplace(std::move(key), f).first->second;
}

// The canonical tree's partial sums of one chunk (parallel/canonical_store.h)
// whose backwards arrive in `order`: per unit, and for a LM head tied to the
// embedding of its stage the head's own tree (at least its leaf).
int64_t canonical_tree_floats(const Config& cfg, const ParamTable& t, const std::vector<int64_t>& order) {
  const int64_t per_unit = canonical_buffers_per_unit(order);
  int64_t f = per_unit * units_total(make_units(t, cfg.model));
  if (cfg.model.tie_embeddings && t.embed_unit >= 0 && t.final_unit >= 0)
    f += std::max<int64_t>(1, per_unit) * t.units[static_cast<size_t>(t.embed_unit)].numel();
  return f;
}

// Rank `rank` of the layout whose schedule (memory_model::schedule_of) is `s`.
RankMemory rank_memory(const Config& cfg, const pp::Schedule& s, int64_t rank, StoreCache& cache) {
  const ModelConfig& m = cfg.model;
  const ParallelConfig& p = cfg.parallel;
  const RankCoords c = mesh_coords(p, rank);
  const int v = static_cast<int>(p.virtual_stages);
  const std::vector<StageRange> stages =
      p.pp * v > 1 ? split_stages(cfg.parsed().stage_layers) : std::vector<StageRange>{StageRange{}};
  const tp2d::Grid& grid = cfg.parsed().tp_grid;
  const TpDims td = tp_dims(m, {static_cast<int>(p.tp), static_cast<int>(c.tp)}, grid);
  const EpRank ep =
      p.ep > 1 ? EpRank{static_cast<int>(p.ep), static_cast<int>(c.ep), static_cast<int>(p.cp)} : EpRank{};
  const std::vector<int64_t> slots = memory_model::slots_per_chunk(cfg, s, c.pp);
  Floats f;
  int64_t residual = 0;
  for (int k = 0; k < v; ++k) {
    const StageRange& stage = stages[static_cast<size_t>(k * p.pp + c.pp)];
    const TpRank tpr{static_cast<int>(p.tp), static_cast<int>(c.tp)};
    const Floats& store = chunk_store(cfg, stage, tpr, grid, ep, cache);
    for (int kind = 0; kind < kNumMemKinds; ++kind)
      f.add(static_cast<MemKind>(kind), store.lo[static_cast<size_t>(kind)],
            store.hi[static_cast<size_t>(kind)]);
    if (!cfg.train.checkpoint_dir.empty())  // the staging copy depends on the rank's shard: no cache
      f.add(MemKind::ckpt_staging,
            memory_model::checkpoint_staging_floats(cfg, rank, make_param_table(m, tpr, stage, ep, grid)));
    const memory_model::ChunkFloats cf =
        memory_model::chunk_floats(cfg, td, stage, slots[static_cast<size_t>(k)]);
    f.add(MemKind::activation, cf.activation);
    f.add(MemKind::scratch, cf.scratch);
    residual = std::max(residual, cf.residual);
    if (cfg.parsed().reduction == Reduction::canonical)
      f.add(MemKind::grad, canonical_tree_floats(cfg, make_param_table(m, tpr, stage, ep, grid),
                                                 backward_order(s, c.pp, k)));
    if (cfg.parsed().reduction == Reduction::canonical && p.ep > 1)  // the expert leaves (expert_canonical.h)
      f.add(MemKind::grad, expert_leaf_floats(cfg, stage, backward_order(s, c.pp, k)));
  }
  add_pipeline(cfg, s, c.pp, residual, f);
  const memory_model::CpFloats cpf = memory_model::cp_floats(cfg, td);
  f.add(MemKind::comm, cpf.comm);
  f.add(MemKind::scratch, cpf.scratch);
  RankMemory r;
  r.rank = rank;
  for (size_t k = 0; k < r.lower.size(); ++k) {
    r.lower[k] = f.lo[k] * kFloat;
    r.upper[k] = f.hi[k] * kFloat;
  }
  return r;
}

}  // namespace

RankMemory estimate_rank_memory(const Config& cfg, int64_t rank) {
  StoreCache cache;
  return rank_memory(cfg, memory_model::schedule_of(cfg), rank, cache);
}

std::vector<RankMemory> estimate_ranks(const Config& cfg, const std::vector<int64_t>& ranks) {
  const pp::Schedule s = memory_model::schedule_of(cfg);
  StoreCache cache;
  std::vector<RankMemory> out;
  out.reserve(ranks.size());
  for (const int64_t r : ranks)
    out.push_back(rank_memory(cfg, s, r, cache));
  return out;
}

std::vector<RankMemory> estimate_all_ranks(const Config& cfg) {
  const ParallelConfig& p = cfg.parallel;
  std::vector<int64_t> ranks(static_cast<size_t>(p.dp * p.pp * p.cp * p.tp));
  for (size_t r = 0; r < ranks.size(); ++r)
    ranks[r] = static_cast<int64_t>(r);
  return estimate_ranks(cfg, ranks);
}

std::string memory_model_table(const std::vector<RankMemory>& model,
                               const std::vector<std::array<int64_t, kNumMemKinds>>& measured,
                               bool* all_within) {
  std::ostringstream os;
  os << "memory model per rank (bytes; the model's peak, the bound, the measured peak of the last step):\n";
  char buf[160];
  *all_within = true;
  for (size_t r = 0; r < model.size() && r < measured.size(); ++r) {
    for (int k = 0; k < kNumMemKinds; ++k) {
      const size_t i = static_cast<size_t>(k);
      const int64_t lo = model[r].lower[i], hi = model[r].upper[i], got = measured[r][i];
      const bool ok = got >= lo && got <= hi;
      *all_within = *all_within && ok;
      const std::string bound = lo == hi ? "exact" : "<= " + std::to_string(hi);
      std::snprintf(buf, sizeof buf, "  rank %3zu %-12s model %12lld %-16s measured %12lld %s\n", r,
                    std::string(mem_kind_name(static_cast<MemKind>(k))).c_str(), static_cast<long long>(lo),
                    bound.c_str(), static_cast<long long>(got), ok ? "ok" : "OUTSIDE");
      os << buf;
    }
  }
  return os.str();
}

}  // namespace mt

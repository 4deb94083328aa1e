#include "cost/memory_model.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "cost/memory_model_parts.h"
#include "model/params.h"
#include "model/stage_split.h"
#include "parallel/shard.h"
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

// One unit's shards under a DataParallelStore (parallel/data_parallel_state.cpp
// make_parts): one part over the whole dp×cp group, or with ep and ZeRO the
// dense parameters over it and the experts over their replicas.
struct UnitShape {
  int64_t numel = 0;     // the full unit
  int64_t shard = 0;     // this rank's shard of it
  int64_t gathered = 0;  // Σ over parts of group size × shard: one all-gather's (or reduce-scatter's) buffers
  int64_t max_part = 0;  // the largest of one part's
};

UnitShape unit_shape(const UnitSpec& u, const ParallelConfig& p) {
  UnitShape s;
  s.numel = u.numel();
  const int P = static_cast<int>(p.dp * p.cp);
  auto add = [&](const UnitShards& sh, int size) {
    s.shard += sh.shard_numel();
    s.gathered += size * sh.shard_numel();
    s.max_part = std::max(s.max_part, size * sh.shard_numel());
  };
  if (p.ep <= 1 || p.zero == 0) {
    add(UnitShards(u, P), P);
    return s;
  }
  for (const bool expert : {false, true}) {
    const int size = expert ? P / static_cast<int>(p.ep) : P;
    const UnitShards sh(u, size, [expert](const ParamSlot& q) { return q.expert == expert; });
    if (!sh.pieces().empty()) add(sh, size);
  }
  return s;
}

// ZeRO 2/3 acquire one unit's full gradient at a time, freed once packed for
// its reduce-scatter; a head tied to the embedding of the same stage adds into
// the embedding unit's gradient from the head's backward to the embedding's,
// so that one is held beside every other unit's.
int64_t held_grads(const ParamTable& table, const std::vector<UnitSpec>& units) {
  int64_t largest = 0, others = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    largest = std::max(largest, units[u].numel());
    if (static_cast<int>(u) != table.embed_unit) others = std::max(others, units[u].numel());
  }
  const bool tied_here = table.embed_unit >= 0 && table.lm_head >= 0 && table.lm_head == table.embed;
  return tied_here ? units[static_cast<size_t>(table.embed_unit)].numel() + others : largest;
}

// A chunk's parameters, gradients, optimizer state and ZeRO buffers
// (parallel/local_store.cpp, parallel/data_parallel.cpp).
void add_store(const Config& cfg, const ParamTable& table, const std::vector<UnitSpec>& units, Floats& f) {
  const ParallelConfig& p = cfg.parallel;
  const int64_t states = memory_model::optimizer_states(cfg);
  const int64_t total = units_total(units);
  const int z = static_cast<int>(p.zero);
  if (p.dp * p.cp == 1 && z == 0) {  // the model's own LocalStore
    f.add(MemKind::param, total);
    f.add(MemKind::grad, total);
    f.add(MemKind::optim, states * total);
    return;
  }
  int64_t local = 0, max_unit = 0, max_part = 0, max_gather = 0, max_scatter = 0;
  for (const UnitSpec& u : units) {
    const UnitShape s = unit_shape(u, p);
    local += s.shard;
    max_unit = std::max(max_unit, s.numel);
    max_part = std::max(max_part, s.max_part);
    max_gather = std::max(max_gather, s.gathered);
    max_scatter = std::max(max_scatter, s.gathered + s.shard);  // send buffers and the received shard
  }
  f.add(MemKind::param, z <= 2 ? total : local);
  // ZeRO 1 keeps both: the all-reduced full gradient, then its shard copied out for the update.
  f.add(MemKind::grad, (z <= 1 ? total : 0) + (z >= 1 ? local : 0));
  if (z == 1 || z == 2) f.add(MemKind::scratch, local);  // the updated shard before its all-gather
  f.add(MemKind::optim, states * (z == 0 ? total : local));
  if (z >= 2) f.add(MemKind::grad, held_grads(table, units));
  if (z == 3) f.add(MemKind::param, max_unit, 2 * max_unit);  // the gathered unit (and the next, prefetched)
  // The pool of communication buffers (parallel/data_parallel.cpp take_comm):
  // ZeRO 1 all-gathers the updated shards one part at a time; ZeRO 2 keeps one
  // unit's reduce-scatter in flight (its send buffer then serves the
  // all-gathers); ZeRO 3 also prefetches one unit's gather while the previous
  // unit's reduce-scatter runs. Which unit's buffers meet depends on the order
  // the units' sizes come in, hence the bound.
  // Units (and, with ep, the dense and expert parts) differ in size, and the
  // pool's best fit can leave one more part's buffer beside those in use
  // (measured: a tied embedding's unit, ep's two parts).
  const int64_t stranded = max_part;
  if (z == 1) f.add(MemKind::comm, max_part);
  if (z == 2) f.add(MemKind::comm, max_scatter, max_scatter + stranded);
  if (z == 3) {
    f.add(MemKind::comm, max_scatter + (units.size() > 1 ? max_gather : 0),
          2 * max_gather + max_scatter + stranded);
  }
}

// The pipeline's transfer buffers (pipeline/executor.cpp): kRecvAhead posted
// receives, and a send buffer per gradient send still on the wire.
void add_pipeline(const Config& cfg, const pp::Schedule& s, int64_t pp_rank, int64_t residual, Floats& f) {
  const ParallelConfig& p = cfg.parallel;
  if (p.pp * p.virtual_stages <= 1) return;
  int64_t recvs = 0, grad_sends = 0;
  for (const pp::Action& a : s.ranks[static_cast<size_t>(pp_rank)]) {
    recvs += a.op == pp::Op::recv_act || a.op == pp::Op::recv_grad;
    grad_sends += a.op == pp::Op::send_grad;
  }
  const int64_t posted = std::min<int64_t>(static_cast<int64_t>(pp::Executor::kRecvAhead), recvs);
  f.add(MemKind::comm, (posted + std::min<int64_t>(1, grad_sends)) * residual,
        (posted + grad_sends) * residual);
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

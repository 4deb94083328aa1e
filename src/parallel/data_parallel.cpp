#include "parallel/data_parallel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>

#include "core/error.h"
#include "core/timer.h"
#include "ops/primitives.h"
#include "parallel/dp_allreduce.h"
#include "parallel/expert_grads.h"
#include "parallel/local_store.h"
#include "parallel/store_plan.h"

namespace mt {

namespace {
double now_s() {
  static const Timer epoch;
  return epoch.seconds();
}
void add_into(float* y, const float* x, int64_t n) {
  add(y, x, n);
}
}  // namespace

void check_zero_stage(int64_t zero) {
  MT_REQUIRE(zero >= 0 && zero <= 3, ConfigError, "parallel.zero (", zero, ") must be 0, 1, 2 or 3");
}

int64_t shard_group_dp(int64_t dp_shard, int64_t dp) {
  return dp_shard == 0 ? dp : dp_shard;
}

bool is_hsdp(int64_t dp_shard, int64_t dp) {
  return shard_group_dp(dp_shard, dp) < dp;
}

void check_dp_shard(const DpShardLayout& l) {
  const int64_t s = l.dp_shard;
  MT_REQUIRE(s >= 0 && (s == 0 || l.dp % s == 0), ConfigError, "parallel.dp_shard (", s,
             ") must divide parallel.dp (", l.dp, "): dp = replicas x shards (0: dp, flat ZeRO)");
  if (!is_hsdp(s, l.dp)) return;
  MT_REQUIRE(l.zero >= 1, ConfigError, "parallel.dp_shard (", s, ") < parallel.dp (", l.dp,
             ") shards ZeRO's state within groups of ", s,
             " dp ranks: it needs parallel.zero 1, 2 or 3, not ", l.zero, " (ZeRO 0 shards nothing)");
  MT_REQUIRE(l.ep == 1, ConfigError, "parallel.dp_shard (", s, ") < parallel.dp (", l.dp,
             ") with parallel.ep (", l.ep, "): HSDP with expert parallelism is not built yet");
  MT_REQUIRE(!l.canonical || (s & (s - 1)) == 0, ConfigError, "parallel.dp_shard (", s,
             ") in the canonical mode must be a power of two, so that a shard group's reduce-scatter is an "
             "aligned subtree of the canonical tree over the ",
             l.dp, " dp ranks");
}

struct DataParallelStore::Bucket {
  int64_t begin = 0, end = 0;  // range of the flat gradient buffer
  int units = 0, ready = 0;
  std::vector<Work> works;  // one all-reduce, or with experts one per GradRun
  float* shard = nullptr;   // parallel.dp_allreduce = hierarchical: its node shard (node_shards_)
  size_t hier = 0;          // and its index in the step's HierarchicalAllReduces
  bool launched = false, done = false;
  std::string label;
};

struct DataParallelStore::Gathered {
  std::vector<Tensor> packed;  // per part, [P · shard] as received
  Tensor full;                 // [unit.numel()] unpacked
  std::vector<Work> works;
  bool unpacked = false;
  int users = 0;
};

// Under HSDP the reduce-scattered shard is then all-reduced over the replicas
// (`replicas` non-null), launched once the shard is complete: the sum over the
// shard group first, then over the groups, the order of the canonical tree
// over the dp ranks when the shard groups are aligned blocks of it.
struct DataParallelStore::Scattering {
  int unit = 0;
  std::vector<Tensor> send;  // per part
  Tensor recv;               // the unit's shard (a pooled buffer: it may be longer)
  int64_t shard = 0;         // the shard's elements
  std::vector<Work> works;
  Group* replicas = nullptr;
  Work across;  // the all-reduce over the replicas
  SumOrder order = SumOrder::library;
  std::string label;
  void launch_across() {
    if (replicas != nullptr && !across.valid())
      across = replicas->all_reduce_async(recv.data(), shard, ElemType::f32, order, label + " replicas");
  }
  bool test() {
    if (!std::all_of(works.begin(), works.end(), [](Work& w) { return w.test(); })) return false;
    if (replicas == nullptr) return true;
    launch_across();
    return across.test();
  }
  void wait() {
    for (Work& w : works)
      w.wait();
    launch_across();
    if (across.valid()) across.wait();
  }
};

DataParallelStore::DataParallelStore(std::vector<UnitSpec> units, Group dp, const DataParallelOptions& opts)
    : units_(std::move(units)),
      dp_(std::move(dp)),
      opts_(opts),
      shard_(opts_.shard != nullptr ? opts_.shard : &dp_),
      P_(shard_->size()) {
  check_zero_stage(opts_.zero);
  MT_REQUIRE(opts_.ep == nullptr || opts_.zero == 0 || opts_.expert_replicas != nullptr, ConfigError,
             "parallel.ep with parallel.zero (", opts_.zero, ") needs the experts' replica group");
  MT_CHECK((opts_.shard == nullptr) == (opts_.replicas == nullptr) &&
               (opts_.shard == nullptr || opts_.ep == nullptr),
           "HSDP needs both its shard and replica groups, and no expert parallelism");
  MT_CHECK(opts_.nodes == nullptr || (opts_.zero <= 1 && opts_.ep == nullptr && opts_.shard == nullptr),
           "the hierarchical all-reduce is of ZeRO 0/1 without experts or HSDP");
  for (const auto& u : units_) {
    parts_.push_back(make_parts(u));
    shard_offset_.push_back(local_numel_);
    const Part* last = parts_.back().empty() ? nullptr : &parts_.back().back();
    shard_numel_.push_back(last == nullptr ? 0 : last->in_shard + last->shards.shard_numel());
    local_numel_ += shard_numel_.back();
  }
  const int z = opts_.zero;
  StoreShape shape;
  shape.group = P_;
  shape.replicas = replicas();
  shape.zero = z;
  if (opts_.nodes != nullptr) {
    shape.node_ranks = {opts_.nodes->node.size(), opts_.nodes->node.size()};
    shape.bucket_bytes = opts_.bucket_bytes;
  }
  const StorePlan plan = store_plan(units_, shape);  // the fixed buffers of stage z
  full_params_ = plan.make("full_params");
  full_grads_ = plan.make("full_grads");
  local_params_ = plan.make("local_params");
  local_grads_ = plan.make("local_grads");
  MT_CHECK(plan.local_numel == local_numel(), "the store plan's local share (", plan.local_numel,
           ") is not the store's (", local_numel(), ")");
  if (z <= 1) {
    bucket_of_unit_.assign(units_.size(), -1);
    for (const BucketRange& r : bucket_ranges(units_, opts_.bucket_bytes)) {
      auto b = std::make_unique<Bucket>();
      b->begin = r.begin;
      b->end = r.end;
      b->units = r.units;
      b->label = "grad bucket " + std::to_string(buckets_.size());
      for (int u = r.first_unit; u < r.first_unit + r.units; ++u)
        bucket_of_unit_[static_cast<size_t>(u)] = static_cast<int>(buckets_.size());
      buckets_.push_back(std::move(b));
    }
    if (opts_.nodes != nullptr) {  // each bucket's shard, carved from the plan's one buffer
      node_shards_ = plan.make("node_shards");
      int64_t at = 0;
      for (auto& b : buckets_) {
        b->shard = node_shards_.data() + at;
        at += HierarchicalAllReduces::shard_numel(b->end - b->begin, opts_.nodes->node.size());
      }
      MT_CHECK(at == node_shards_.numel(), "the node shards (", at, ") are not the plan's (",
               node_shards_.numel(), ")");
      hier_ = std::make_unique<HierarchicalAllReduces>(dp_, *opts_.nodes, opts_.order);
    }
  }
}

StoreSharding DataParallelStore::sharding() const {
  const AxisSet dp = axis_bit(Axis::dp);
  return {opts_.zero, dp_.axis() == "dp+cp" ? dp | axis_bit(Axis::cp) : dp, opts_.dp_shard};
}

DataParallelStore::~DataParallelStore() = default;

Tensor DataParallelStore::take_comm(int64_t n) {
  size_t best = comm_pool_.size();
  for (size_t i = 0; i < comm_pool_.size(); ++i) {
    if (comm_pool_[i].numel() >= n &&
        (best == comm_pool_.size() || comm_pool_[i].numel() < comm_pool_[best].numel())) {
      best = i;
    }
  }
  if (best == comm_pool_.size()) {
    // Every pooled buffer is too small: the largest of them goes before the
    // new one is made, so the pool never holds more buffers than were ever in
    // use at once (the embedding's gather buffer, a few floats short of the
    // final unit's, would otherwise stay beside it for the rest of the run).
    const auto largest =
        std::max_element(comm_pool_.begin(), comm_pool_.end(),
                         [](const Tensor& a, const Tensor& b) { return a.numel() < b.numel(); });
    if (largest != comm_pool_.end()) comm_pool_.erase(largest);
    return Tensor({n}, MemKind::comm);
  }
  Tensor t = std::move(comm_pool_[best]);
  comm_pool_.erase(comm_pool_.begin() + static_cast<std::ptrdiff_t>(best));
  return t;
}

void DataParallelStore::give_comm(Tensor t) {
  if (!t.empty()) comm_pool_.push_back(std::move(t));
}

// ---- model side ---------------------------------------------------------------

void DataParallelStore::start_gather(int unit) {
  auto g = std::make_unique<Gathered>();
  for (const Part& part : parts_[static_cast<size_t>(unit)]) {
    const int64_t n = part.shards.shard_numel();
    g->packed.push_back(take_comm(part.group->size() * n));
    g->works.push_back(part.group->all_gather_async(
        shard_of(local_params_, unit) + part.in_shard, g->packed.back().data(), n, ElemType::f32,
        units_[static_cast<size_t>(unit)].name + " params" + part.suffix));
  }
  gathered_[unit] = std::move(g);
}

void DataParallelStore::prefetch(int unit, Pass pass) {
  const int next = pass == Pass::forward ? unit + 1 : unit - 1;
  if (next < 1 && pass == Pass::backward) return;  // the embedding's backward needs no parameters
  if (next < 0 || next >= static_cast<int>(units_.size()) || gathered_.count(next)) return;
  start_gather(next);
}

const float* DataParallelStore::acquire_params(int unit, Pass pass) {
  if (opts_.zero < 3) return full_params_.data() + units_[static_cast<size_t>(unit)].begin;
  if (!gathered_.count(unit)) start_gather(unit);
  Gathered& g = *gathered_[unit];
  if (!g.unpacked) {
    g.full = Tensor({units_[static_cast<size_t>(unit)].numel()}, MemKind::param);
    const std::vector<Part>& parts = parts_[static_cast<size_t>(unit)];
    for (size_t i = 0; i < parts.size(); ++i) {
      g.works[i].wait();
      parts[i].shards.unpack(g.packed[i].data(), g.full.data());
      give_comm(std::move(g.packed[i]));
    }
    g.unpacked = true;
  }
  g.users += 1;
  prefetch(unit, pass);  // the next unit's gather overlaps this unit's compute
  return g.full.data();
}

void DataParallelStore::release_params(int unit, Pass) {
  progress();
  if (opts_.zero < 3) return;
  auto it = gathered_.find(unit);
  MT_CHECK(it != gathered_.end() && it->second->users > 0, "release of parameters not acquired");
  if (--it->second->users == 0) gathered_.erase(it);  // freed: only the shard stays
}

float* DataParallelStore::acquire_grads(int unit) {
  if (opts_.zero <= 1) return full_grads_.data() + units_[static_cast<size_t>(unit)].begin;
  auto [it, fresh] = unit_grads_.try_emplace(unit);
  if (fresh) it->second = Tensor({units_[static_cast<size_t>(unit)].numel()}, MemKind::grad);
  return it->second.data();
}

void DataParallelStore::release_grads(int unit) {
  if (opts_.zero <= 1) {
    if (sync_microbatch()) unit_ready_for_buckets(unit);
    progress();
    return;
  }
  // ZeRO 2/3: reduce-scatter this unit's gradient now (every microbatch); the
  // full-size buffer is freed as soon as it is packed.
  auto it = unit_grads_.find(unit);
  MT_CHECK(it != unit_grads_.end(), "release of gradients not acquired");
  // One reduce-scatter in flight: it overlaps the next unit's backward, and
  // its buffers go back to the pool before this one takes any, so the pool
  // holds one unit's reduce-scatter and the gathers, not every unit's
  // (docs/PARALLELISM.md "Memory per rank").
  retire_scatters(kScattersInFlight - 1);
  auto s = std::make_unique<Scattering>();
  s->unit = unit;
  s->replicas = opts_.replicas;
  s->order = opts_.order;
  s->label = units_[static_cast<size_t>(unit)].name + " grads";
  s->shard = shard_numel_[static_cast<size_t>(unit)];
  s->recv = take_comm(s->shard);
  for (const Part& part : parts_[static_cast<size_t>(unit)]) {
    const int64_t n = part.shards.shard_numel();
    s->send.push_back(take_comm(part.group->size() * n));
    part.shards.pack(it->second.data(), s->send.back().data());
    s->works.push_back(part.group->reduce_scatter_async(
        s->send.back().data(), s->recv.data() + part.in_shard, n, ElemType::f32, opts_.order,
        units_[static_cast<size_t>(unit)].name + " grads" + part.suffix));
  }
  unit_grads_.erase(it);
  scattering_.push_back(std::move(s));
  progress();
}

void DataParallelStore::unit_ready_for_buckets(int unit) {
  Bucket& b = *buckets_[static_cast<size_t>(bucket_of_unit_[static_cast<size_t>(unit)])];
  if (++b.ready < b.units) return;
  if (first_launch_ < 0) first_launch_ = now_s();
  b.works.clear();
  if (hier_ != nullptr) {
    b.hier = hier_launched_++;
    hier_->add(full_grads_.data() + b.begin, b.end - b.begin, b.shard, b.label);
  } else if (opts_.ep == nullptr) {
    b.works.push_back(dp_.all_reduce_async(full_grads_.data() + b.begin, b.end - b.begin, ElemType::f32,
                                           opts_.order, b.label));
  } else {  // the experts over their replicas only
    b.works = all_reduce_runs(units_, full_grads_.data(), b.begin, b.end, dp_, opts_.expert_replicas, b.label,
                              opts_.order);
  }
  b.launched = true;
}

void DataParallelStore::progress() {
  for (auto& b : buckets_) {
    if (b->launched && !b->done)
      b->done = std::all_of(b->works.begin(), b->works.end(), [](Work& w) { return w.test(); }) &&
                (hier_ == nullptr || hier_->test(b->hier));
  }
  for (auto& [u, g] : gathered_) {
    if (!g->unpacked) {
      for (Work& w : g->works)
        w.test();
    }
  }
  retire_scatters(SIZE_MAX);  // only those already done
}

void DataParallelStore::retire_scatters(size_t keep) {
  // In launch order, so that the sums are added in the same order every run.
  while (!scattering_.empty()) {
    Scattering& s = *scattering_.front();
    if (scattering_.size() > keep) {
      s.wait();
    } else if (!s.test()) {
      return;
    }
    add_into(shard_of(local_grads_, s.unit), s.recv.data(), shard_numel_[static_cast<size_t>(s.unit)]);
    for (Tensor& t : s.send)
      give_comm(std::move(t));
    give_comm(std::move(s.recv));
    scattering_.pop_front();
  }
}

// ---- trainer side -------------------------------------------------------------

void DataParallelStore::begin_step(int64_t microbatches) {
  microbatches_ = microbatches;
  microbatch_ = 0;
  if (full_grads_.numel()) full_grads_.zero();
  if (local_grads_.numel()) local_grads_.zero();
  for (auto& b : buckets_) {
    b->ready = 0;
    b->launched = b->done = false;
  }
  first_launch_ = -1;
}

void DataParallelStore::begin_microbatch(int64_t index, int64_t /*microbatch: the index suffices*/) {
  microbatch_ = index;
}

void DataParallelStore::finish_grads() {
  const double t0 = now_s();
  for (auto& b : buckets_) {
    MT_CHECK(b->launched, "a gradient bucket was never filled: ", b->label);
    for (Work& w : b->works)
      w.wait();  // nothing to wait for when done
    b->done = true;
  }
  if (hier_ != nullptr) hier_->wait_all();
  hier_launched_ = 0;
  retire_scatters(0);
  const double t1 = now_s();
  overlap_.exposed_s = t1 - t0;
  overlap_.comm_window_s = first_launch_ >= 0 ? t1 - first_launch_ : 0.0;
  if (opts_.zero == 1) {
    for (size_t u = 0; u < units_.size(); ++u)
      extract(u, full_grads_.data() + units_[u].begin, local_grads_.data() + shard_offset_[u]);
  }
}

}  // namespace mt

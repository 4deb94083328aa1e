// The store's buffer plan (contracts in the header). The fixed buffers are
// allocated from it by the stores; the dynamic ones (the gathered units, the
// full gradients of ZeRO 2/3, the comm pool) are taken and freed as the
// model's units run, so their entries state the bounds that
// tests/dist/test_store_plan.cpp and tests/dist/memory_model.sh hold them to.
#include "parallel/store_plan.h"

#include <algorithm>

namespace mt {

namespace {

// One unit's parts: its shard, and the buffers of one all-gather (or
// reduce-scatter) of it — Σ over parts of group size × shard — and the
// largest of one part's.
struct UnitShape {
  int64_t numel = 0, shard = 0, gathered = 0, max_part = 0;
};

UnitShape unit_shape(const UnitSpec& u, const StoreShape& s) {
  UnitShape r;
  r.numel = u.numel();
  for (const UnitPart& part : unit_parts(u, s.group, s.replicas)) {
    const int64_t n = part.shards.shard_numel(), size = part.shards.ranks();
    r.shard += n;
    r.gathered += size * n;
    r.max_part = std::max(r.max_part, size * n);
  }
  return r;
}

// ZeRO 2/3 acquire one unit's full gradient at a time, freed once packed for
// its reduce-scatter; a tied unit's is held beside every other unit's.
int64_t held_grads(const std::vector<UnitSpec>& units, int tied_unit) {
  int64_t largest = 0, others = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    largest = std::max(largest, units[u].numel());
    if (static_cast<int>(u) != tied_unit) others = std::max(others, units[u].numel());
  }
  return tied_unit >= 0 ? units[static_cast<size_t>(tied_unit)].numel() + others : largest;
}

// The pool of communication buffers (data_parallel.cpp take_comm): ZeRO 1
// all-gathers the updated shards one part at a time; ZeRO 2 keeps one unit's
// reduce-scatter in flight (its send buffers and the received shard; they then
// serve the all-gathers); ZeRO 3 also prefetches one unit's gather while the
// previous unit's reduce-scatter runs. Which unit's buffers meet depends on
// the order the units' sizes come in, hence the bound; and the pool's best fit
// can leave one more part's buffer beside those in use (measured: a tied
// embedding's unit, ep's two parts).
StoreBuffer comm_pool(const std::vector<UnitShape>& shapes, int zero) {
  int64_t max_part = 0, max_gather = 0, max_scatter = 0;
  for (const UnitShape& s : shapes) {
    max_part = std::max(max_part, s.max_part);
    max_gather = std::max(max_gather, s.gathered);
    max_scatter = std::max(max_scatter, s.gathered + s.shard);
  }
  const int64_t stranded = max_part;
  if (zero == 1) return {"comm_pool", MemKind::comm, max_part, max_part};
  if (zero == 2) return {"comm_pool", MemKind::comm, max_scatter, max_scatter + stranded};
  return {"comm_pool", MemKind::comm, max_scatter + (shapes.size() > 1 ? max_gather : 0),
          2 * max_gather + max_scatter + stranded};
}

// Σ over buckets of each one's node shard, g ranks per node.
int64_t node_shards(const std::vector<BucketRange>& buckets, int g) {
  int64_t n = 0;
  for (const BucketRange& b : buckets)
    n += (b.end - b.begin) / g;
  return n;
}

}  // namespace

std::vector<BucketRange> bucket_ranges(const std::vector<UnitSpec>& units, int64_t bucket_bytes) {
  std::vector<BucketRange> out;
  for (int u = static_cast<int>(units.size()) - 1; u >= 0; --u) {
    const UnitSpec& spec = units[static_cast<size_t>(u)];
    if (out.empty() || (out.back().end - out.back().begin) * 4 >= bucket_bytes)
      out.push_back({0, spec.end, u, 0});
    BucketRange& b = out.back();
    b.begin = spec.begin;
    b.first_unit = u;
    b.units += 1;
  }
  return out;
}

std::vector<UnitPart> unit_parts(const UnitSpec& unit, int P, int replicas) {
  std::vector<UnitPart> parts;
  if (replicas <= 0) {
    parts.push_back({UnitShards(unit, P), false});
    return parts;
  }
  for (const bool expert : {false, true}) {
    UnitShards sh(unit, expert ? replicas : P, [expert](const ParamSlot& p) { return p.expert == expert; });
    if (!sh.pieces().empty()) parts.push_back({std::move(sh), expert});
  }
  return parts;
}

const StoreBuffer* StorePlan::find(std::string_view name) const {
  for (const StoreBuffer& b : buffers)
    if (name == b.name) return &b;
  return nullptr;
}

Tensor StorePlan::make(std::string_view name) const {
  const StoreBuffer* b = find(name);
  return b == nullptr ? Tensor() : Tensor({b->least}, b->kind);
}

StorePlan store_plan(const std::vector<UnitSpec>& units, const StoreShape& s) {
  const int64_t total = units_total(units);
  const int z = s.zero;
  StorePlan plan;
  if (s.group == 0) {  // the model's own LocalStore
    plan.buffers = {{"params", MemKind::param, total, total}, {"grads", MemKind::grad, total, total}};
    plan.local_numel = total;
    return plan;
  }
  std::vector<UnitShape> shapes;
  int64_t local = 0, max_unit = 0;
  for (const UnitSpec& u : units) {
    shapes.push_back(unit_shape(u, s));
    local += shapes.back().shard;
    max_unit = std::max(max_unit, shapes.back().numel);
  }
  std::vector<StoreBuffer>& b = plan.buffers;
  if (z <= 2) b.push_back({"full_params", MemKind::param, total, total});
  if (z == 3) b.push_back({"local_params", MemKind::param, local, local});
  if (z == 1 || z == 2) b.push_back({"local_params", MemKind::scratch, local, local});
  if (z <= 1) b.push_back({"full_grads", MemKind::grad, total, total});
  // ZeRO 1 keeps both: the all-reduced full gradient, then its shard copied out for the update.
  if (z >= 1) b.push_back({"local_grads", MemKind::grad, local, local});
  if (z >= 2) {
    const int64_t held = held_grads(units, s.tied_unit);
    b.push_back({"unit_grads", MemKind::grad, held, held});
  }
  if (z == 3) b.push_back({"gathered_unit", MemKind::param, max_unit, 2 * max_unit});
  if (z >= 1) b.push_back(comm_pool(shapes, z));
  if (z <= 1 && s.node_ranks.most > 0) {
    const std::vector<BucketRange> buckets = bucket_ranges(units, s.bucket_bytes);
    b.push_back({"node_shards", MemKind::comm, node_shards(buckets, s.node_ranks.most),
                 node_shards(buckets, s.node_ranks.least)});
  }
  plan.local_numel = z == 0 ? total : local;
  return plan;
}

}  // namespace mt

// The buffers of a chunk's parameter store as data: for a store's shape (its
// group, ZeRO stage, expert replicas), every tracked buffer it holds, by name,
// allocator kind (core/memory.h) and floats — exact, or the bound within which
// a dynamic one (the ZeRO 3 gathered unit, the pool of communication buffers)
// stays. It is the one statement of these sizes: LocalStore and
// DataParallelStore (local_store.cpp, data_parallel.cpp) allocate their fixed
// buffers from these entries, DataParallelStore splits each unit into parts
// with unit_parts, and the memory model (cost/memory_model.cpp add_store) sums
// the same entries (docs/ARCHITECTURE.md "Sizes are data").
//
// It lives in parallel/ beside the stores; cost/ links parallel/ already.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"
#include "parallel/shard.h"
#include "parallel/store.h"

namespace mt {

// One part of a unit's shard (DataParallelStore::make_parts): every parameter
// over the store's group of P ranks or, with the experts sharded apart
// (replicas > 0: expert parallelism at ZeRO 1-3), the dense parameters over
// the group then the experts over their `replicas` ranks; a part without
// parameters is left out. `shards` points into `unit`, which must outlive it.
struct UnitPart {
  UnitShards shards;
  bool expert = false;
};
std::vector<UnitPart> unit_parts(const UnitSpec& unit, int P, int replicas);

// What a store is sized by. group: the DataParallelStore's ranks (dp·cp), 0
// for the model's own LocalStore (store_sharding.h says which); tied_unit: the unit whose gradient a head
// tied to it on the same stage adds into from the head's backward to its own (ZeRO 2/3 hold it beside the
// others'), −1 without.
// node_ranks: the hierarchical all-reduce (parallel/dp_allreduce.h) with the
// group's g ranks per node somewhere in [least, most] (0: flat), its buckets
// of bucket_bytes.
struct StoreShape {
  int group = 0;
  int replicas = 0;
  int zero = 0;
  int tied_unit = -1;
  struct {
    int least = 0, most = 0;
  } node_ranks;
  int64_t bucket_bytes = 0;
};

// The ZeRO 0/1 gradient buckets of `units`: contiguous runs of units of about
// bucket_bytes each, in backward order (the last units first), as [begin, end)
// of the flat buffer with the units each holds.
struct BucketRange {
  int64_t begin = 0, end = 0;
  int first_unit = 0, units = 0;
};
std::vector<BucketRange> bucket_ranges(const std::vector<UnitSpec>& units, int64_t bucket_bytes);

// One buffer: floats `least` at the store's peak, `most` the bound (equal for
// a fixed buffer).
struct StoreBuffer {
  const char* name = "";
  MemKind kind = MemKind::param;
  int64_t least = 0, most = 0;
};

struct StorePlan {
  std::vector<StoreBuffer> buffers;
  int64_t local_numel = 0;  // what the optimizer updates (ParamStore::local_numel)
  // The entry named `name`, null when the store's stage has no such buffer.
  const StoreBuffer* find(std::string_view name) const;
  // A tracked tensor of that fixed entry's floats and kind; an empty tensor
  // when the plan has no such buffer.
  Tensor make(std::string_view name) const;
};

// Every tracked buffer of the store of `units` shaped `s`:
//   LocalStore     params, grads (param, grad: the whole chunk)
//   ZeRO 0-2       full_params (param: the whole chunk)
//   ZeRO 3         local_params (param: this rank's shards), gathered_unit
//                  (param: the unit in use, and the next one prefetched)
//   ZeRO 1-2       local_params (scratch: the updated shards before their all-gather)
//   ZeRO 0-1       full_grads (grad: the whole chunk)
//   ZeRO 1-3       local_grads (grad: this rank's shards)
//   ZeRO 2-3       unit_grads (grad: the full gradients being computed)
//   ZeRO 1-3       comm_pool (comm: the pooled all-gather and reduce-scatter buffers)
//   hierarchical   node_shards (comm: each bucket's ⌊n / g⌋ shard, g ranks per node)
StorePlan store_plan(const std::vector<UnitSpec>& units, const StoreShape& s);

}  // namespace mt

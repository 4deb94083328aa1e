// The store's buffer plan (parallel/store_plan.h) against the tracked
// allocator: a DataParallelStore of every ZeRO stage, under a real model (its
// units acquired and released as the model runs them), over the world's
// ranks, tied embeddings and not. Per kind, the growth of the tracker's peak
// over the store's life (construction, one step and its update) must lie
// within the plan's least and most floats — exactly the plan's floats for the
// kinds with only fixed buffers (ZeRO 0 and 1 param and grad; scratch, whose
// only store buffer is the fixed update shard, is held at construction,
// before the model allocates its own). The model itself allocates no param,
// grad or comm memory. The memory model sums the same plan
// (cost/memory_model.cpp add_store); tests/dist/memory_model.sh holds whole
// runs to it.
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "comm/mpi_test.h"
#include "core/memory.h"
#include "model/llama.h"
#include "model/params.h"
#include "parallel/data_parallel.h"
#include "parallel/local_store.h"
#include "parallel/store_plan.h"
#include "parallel/store_sharding.h"

namespace mt {
namespace {

using test::world;

ModelConfig plan_config(bool tied) {
  ModelConfig c;
  c.vocab_size = 37;  // sizes that do not divide the ranks: padded shards
  c.d_model = 18;
  c.n_layers = 3;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.ffn_hidden = 29;
  c.max_seq_len = 8;
  c.tie_embeddings = tied;
  return c;
}

int64_t at(const std::array<int64_t, kNumMemKinds>& a, MemKind k) {
  return a[static_cast<size_t>(k)];
}

// The floats of kind k above `before`: the peak (or, peak = false, what is held now).
int64_t grown(const MemStats& before, MemKind k, bool peak) {
  const MemStats now = MemoryTracker::stats();
  return ((peak ? at(now.peak, k) : at(now.current, k)) - at(before.current, k)) / 4;
}

void check_stage(int zero, bool tied) {
  const ModelConfig cfg = plan_config(tied);
  const ParamTable table = make_param_table(cfg);
  const std::vector<UnitSpec> units = make_units(table, cfg);
  StoreShape shape;
  shape.group = world().size();
  shape.zero = zero;
  shape.tied_unit = tied ? table.embed_unit : -1;
  const StorePlan plan = store_plan(units, shape);
  std::array<int64_t, kNumMemKinds> least{}, most{};
  for (const StoreBuffer& b : plan.buffers) {
    least[static_cast<size_t>(b.kind)] += b.least;
    most[static_cast<size_t>(b.kind)] += b.most;
  }
  Group dp = world().split(0, world().rank(), "dp");
  DataParallelOptions o;
  o.zero = zero;
  const MemStats before = MemoryTracker::stats();
  MemoryTracker::reset_peaks();
  {
    ModelOptions mo;
    mo.max_batch = 2;
    mo.max_seq = 5;
    Llama model(cfg, mo, std::make_unique<DataParallelStore>(units, dp, o));
    EXPECT_EQ(grown(before, MemKind::scratch, false), at(least, MemKind::scratch)) << "zero " << zero;
    EXPECT_EQ(model.store().local_numel(), plan.local_numel) << "zero " << zero;
    model.init(7);
    std::vector<int32_t> tokens(10);
    for (size_t i = 0; i < tokens.size(); ++i)
      tokens[i] = static_cast<int32_t>((i * 5 + static_cast<size_t>(world().rank())) % 37);
    ParamStore& store = model.store();
    store.begin_step(1);
    store.begin_microbatch(0, 0);
    model.forward(tokens.data(), tokens.data(), 2, 5);
    model.backward(1.0f / static_cast<float>(10 * world().size()));
    store.finish_grads();
    float* p = store.local_params();
    const float* g = store.local_grads();
    for (int64_t i = 0; i < store.local_numel(); ++i)
      p[i] -= 1e-3f * g[i];
    store.after_update();
    for (const MemKind k : {MemKind::param, MemKind::grad, MemKind::comm}) {
      const int64_t got = grown(before, k, true);
      EXPECT_GE(got, at(least, k)) << "zero " << zero << " tied " << tied << " " << mem_kind_name(k);
      EXPECT_LE(got, at(most, k)) << "zero " << zero << " tied " << tied << " " << mem_kind_name(k);
    }
  }
  for (const MemKind k : {MemKind::param, MemKind::grad, MemKind::comm, MemKind::scratch})
    EXPECT_EQ(grown(before, k, false), 0) << "zero " << zero << ": freed with the store";
}

TEST(StorePlan, EveryZeroStagesTrackedPeakIsWithinThePlan) {
  for (const bool tied : {false, true})
    for (int zero = 0; zero <= 3; ++zero)
      check_stage(zero, tied);
}

// The model's own LocalStore: its two buffers, exactly.
TEST(StorePlan, TheLocalStoreHoldsThePlansTwoBuffers) {
  const ModelConfig cfg = plan_config(false);
  const std::vector<UnitSpec> units = make_units(make_param_table(cfg), cfg);
  const StorePlan plan = store_plan(units, StoreShape{});
  ASSERT_EQ(plan.buffers.size(), 2u);
  const MemStats before = MemoryTracker::stats();
  const LocalStore store(units);
  EXPECT_EQ(grown(before, MemKind::param, false), units_total(units));
  EXPECT_EQ(grown(before, MemKind::grad, false), units_total(units));
  EXPECT_EQ(plan.local_numel, units_total(units));
  EXPECT_EQ(store.local_numel(), plan.local_numel);
}

// parallel/store_sharding.h, the rule the trainer's make_store and the memory
// model's checkpoint staging read, against the stores' own sharding(): a
// DataParallelStore over dp (P ranks of dp) or over dp × cp (P ranks of cp),
// and the LocalStore that one rank at ZeRO 0 gets (group 0).
TEST(StorePlan, StoreShardingIsTheStoresOwn) {
  const int P = world().size();
  const std::vector<UnitSpec> units = make_units(make_param_table(plan_config(false)), plan_config(false));
  for (int zero = 0; zero <= 3; ++zero) {
    DataParallelOptions o;
    o.zero = zero;
    for (const bool over_cp : {false, true}) {
      const DataParallelStore store(units, world().split(0, world().rank(), over_cp ? "dp+cp" : "dp"), o);
      const StoreSharding want = over_cp ? store_sharding(1, P, zero) : store_sharding(P, 1, zero);
      EXPECT_EQ(store.sharding().zero, want.zero);
      EXPECT_EQ(store.sharding().group, want.group) << "zero " << zero << " over cp " << over_cp;
    }
  }
  EXPECT_EQ(store_sharding(1, 1, 0).group, LocalStore(units).sharding().group);
  EXPECT_EQ(store_sharding(1, 1, 0).group, 0u);
  EXPECT_NE(store_sharding(1, 1, 1).group, 0u);  // ZeRO 1 on one rank: a DataParallelStore
}

}  // namespace
}  // namespace mt

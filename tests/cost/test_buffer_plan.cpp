// The buffer plan (model/buffer_plan.h) against the allocator: a model built
// in one process holds, under MemKind::activation and MemKind::scratch,
// exactly the bytes the memory model sums from the plan's entries
// (cost/memory_model_parts.h chunk_floats) — so a buffer the model allocates
// beside the plan, or an entry it does not allocate, fails here. Modes one
// process can build: the whole model, recomputation, mixture of experts (with
// recomputation too), and pipeline stages (a middle one carrying the router
// statistics with the residual stream, the last one with the head), with
// several microbatch slots. tp (with SP), the 2-D grid and ep need their
// groups: tests/dist/memory_model.sh compares those layouts' measured peaks
// with the same model, exactly.
#include <gtest/gtest.h>

#include <string>

#include "config/config.h"
#include "core/memory.h"
#include "cost/memory_model_parts.h"
#include "model/buffer_plan.h"
#include "model/llama.h"

namespace mt {
namespace {

Config tiny(bool moe, bool recompute) {
  Config c;
  c.model.vocab_size = 300;
  c.model.d_model = 32;
  c.model.n_layers = 4;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.ffn_hidden = 48;
  c.model.max_seq_len = 8;
  if (moe) {
    c.model.n_experts = 4;
    c.model.expert_ffn_hidden = 24;
    c.model.moe_every = 2;  // layers 1 and 3: dense and MoE layers in every stage below
  }
  c.train.seq_len = 8;
  c.train.batch_size = 2;
  c.train.microbatch_size = 2;
  c.train.recompute = recompute;
  c.validate();
  return c;
}

struct Bytes {
  int64_t activation = 0, scratch = 0;
};

Bytes current() {
  const MemStats s = MemoryTracker::stats();
  return {s.current[static_cast<size_t>(MemKind::activation)],
          s.current[static_cast<size_t>(MemKind::scratch)]};
}

// Builds the chunk of `stage`, makes `slots` slots (slot 0 exists from the
// start; stage_input makes the others on a stage without the embedding) and
// compares what it allocated with the plan's sums.
void expect_plan_matches_allocation(const Config& cfg, const StageRange& stage, int slots,
                                    const std::string& what) {
  SCOPED_TRACE(what);
  ModelOptions mo;
  mo.max_batch = cfg.train.microbatch_size;
  mo.max_seq = cfg.train.seq_len;
  mo.recompute = cfg.train.recompute;
  mo.stage = stage;
  const Bytes before = current();
  Llama model(cfg.model, mo);
  for (int s = 1; s < slots; ++s)
    model.stage_input(s);
  const Bytes after = current();
  const memory_model::ChunkFloats f =
      memory_model::chunk_floats(cfg, tp_dims(cfg.model, TpRank{}), stage, slots);
  EXPECT_GT(f.activation, 0);
  EXPECT_EQ(after.activation - before.activation, f.activation * 4);
  EXPECT_EQ(after.scratch - before.scratch, f.scratch * 4);
}

TEST(BufferPlan, OneProcessAllocatesExactlyThePlan) {
  expect_plan_matches_allocation(tiny(false, false), StageRange{}, 1, "dense");
  expect_plan_matches_allocation(tiny(false, true), StageRange{}, 1, "dense, recompute");
  expect_plan_matches_allocation(tiny(true, false), StageRange{}, 1, "moe");
  expect_plan_matches_allocation(tiny(true, true), StageRange{}, 1, "moe, recompute");
}

TEST(BufferPlan, PipelineStagesAllocateExactlyThePlan) {
  const StageRange middle{1, 3, false, false}, last{3, 4, false, true};
  for (const bool moe : {false, true}) {
    for (const bool recompute : {false, true}) {
      const std::string mode = std::string(moe ? "moe" : "dense") + (recompute ? ", recompute" : "");
      expect_plan_matches_allocation(tiny(moe, recompute), middle, 3, "middle stage, 3 slots, " + mode);
      expect_plan_matches_allocation(tiny(moe, recompute), last, 2, "last stage, 2 slots, " + mode);
    }
  }
}

// The plan's residual stream carries the router statistics between stages
// (MoeTally's wire floats) and nothing on a stage holding both ends.
TEST(BufferPlan, ResidualStreamCarriesTheTallyBetweenStages) {
  const Config cfg = tiny(true, false);
  buffers::Shape s;
  s.B = 2;
  s.T = 8;
  s.moe_layers = {false, true};
  const TpDims td = tp_dims(cfg.model, TpRank{});
  EXPECT_EQ(buffers::chunk_plan(cfg.model, td, s).resid.front().numel(), 16 * 32);
  s.embed = false;
  const buffers::ChunkPlan p = buffers::chunk_plan(cfg.model, td, s);
  EXPECT_EQ(p.resid.size(), 3u);
  EXPECT_EQ(p.resid.front().numel(), 16 * 32 + 2 * 4 + 2 * 4 + 3);  // counts [k, E], psum pairs [E], z, rows
}

}  // namespace
}  // namespace mt

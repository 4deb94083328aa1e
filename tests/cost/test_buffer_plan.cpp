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

#include <array>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/memory.h"
#include "cost/memory_model_parts.h"
#include "model/buffer_plan.h"
#include "model/llama.h"

namespace mt {
namespace {

// recompute: a train.recompute value; selective recomputes every module.
Config tiny(bool moe, const char* recompute) {
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
  c.train.recompute_modules = "attention,mlp,norms";
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
  mo.recompute = cfg.parsed().recompute;
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
  for (const bool moe : {false, true})
    for (const char* recompute : {"none", "full", "selective"})
      expect_plan_matches_allocation(tiny(moe, recompute), StageRange{}, 1,
                                     std::string(moe ? "moe, " : "dense, ") + recompute);
}

TEST(BufferPlan, PipelineStagesAllocateExactlyThePlan) {
  const StageRange middle{1, 3, false, false}, last{3, 4, false, true};
  for (const bool moe : {false, true}) {
    for (const char* recompute : {"none", "full", "selective"}) {
      const std::string mode = std::string(moe ? "moe, " : "dense, ") + recompute;
      expect_plan_matches_allocation(tiny(moe, recompute), middle, 3, "middle stage, 3 slots, " + mode);
      expect_plan_matches_allocation(tiny(moe, recompute), last, 2, "last stage, 2 slots, " + mode);
    }
  }
}

// A selective choice keeps in each slot what it does not recompute, and
// holds one shared set of what it does: per module, the entries it names.
TEST(BufferPlan, SelectiveKeepsWhatItDoesNotRecompute) {
  const Config none = tiny(false, "none");
  const TpDims td = tp_dims(none.model, TpRank{});
  buffers::Shape s;
  s.B = 2;
  s.T = 8;
  s.moe_layers = {false, false};
  const buffers::ChunkPlan all = buffers::chunk_plan(none.model, td, s);
  const auto names = [](const buffers::List& l) {
    std::string out;
    for (const buffers::Entry& e : l)
      out += std::string(out.empty() ? "" : " ") + e.name;
    return out;
  };
  EXPECT_EQ(names(all.dense_layer), "ln1 rstd1 qkv att lse mid ln2 rstd2 gu h");
  EXPECT_TRUE(all.recompute.empty());
  for (const auto& [modules, kept, recomputed] : std::vector<std::array<std::string, 3>>{
           {"attention", "ln1 rstd1 qkv mid ln2 rstd2 gu h", "att lse"},
           {"mlp", "ln1 rstd1 qkv att lse mid ln2 rstd2 gu", "h"},
           {"norms", "qkv att lse mid gu h", "ln1 rstd1 ln2 rstd2"},
           {"mlp,norms,attention", "qkv mid gu", "ln1 rstd1 att lse ln2 rstd2 h"}}) {
    s.recompute = parse_recompute("selective", modules);
    const buffers::ChunkPlan p = buffers::chunk_plan(none.model, td, s);
    EXPECT_EQ(names(p.dense_layer), kept) << modules;
    EXPECT_EQ(names(p.recompute), recomputed) << modules;
    // Two layers: the kept entries and the recomputed ones make up each layer's whole set.
    EXPECT_EQ(p.slot_floats(MemKind::activation) + 2 * floats(p.recompute, MemKind::activation),
              all.slot_floats(MemKind::activation))
        << modules;
  }
}

// The plan's residual stream carries the router statistics between stages
// (MoeTally's wire floats) and nothing on a stage holding both ends.
TEST(BufferPlan, ResidualStreamCarriesTheTallyBetweenStages) {
  const Config cfg = tiny(true, "none");
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

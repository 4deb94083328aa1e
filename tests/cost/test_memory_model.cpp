// The memory model's pieces against hand counts: a rank's mesh coordinates,
// the pipeline's activation slots per schedule, and one process's bytes per
// kind for a tiny model, every buffer counted from docs/PARALLELISM.md
// ("Memory per rank"), and the checkpoint staging copy summed over a mesh. The measured side is
// tests/dist/memory_model.sh.
#include <gtest/gtest.h>

#include "config/config.h"
#include "cost/memory_model.h"
#include "cost/memory_model_parts.h"

namespace mt {
namespace {

Config tiny() {
  Config c;
  c.model.vocab_size = 300;
  c.model.d_model = 32;
  c.model.n_layers = 2;
  c.model.n_heads = 4;
  c.model.n_kv_heads = 2;
  c.model.ffn_hidden = 48;
  c.model.max_seq_len = 4;
  c.train.seq_len = 4;
  c.train.batch_size = 1;
  c.train.microbatch_size = 1;
  return c;
}

// Config::validate's copy of c: the run reads the typed keys it parses.
Config valid(Config c) {
  c.validate();
  return c;
}

TEST(MemoryModel, RankCoordinatesPutTpInnermostAndDpOutermost) {
  ParallelConfig p;
  p.dp = 2;
  p.pp = 2;
  p.cp = 1;
  p.tp = 2;
  const RankCoords c = mesh_coords(p, 5);  // 5 = ((1·2 + 0)·1 + 0)·2 + 1
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 0);
  EXPECT_EQ(c.cp, 0);
  EXPECT_EQ(c.tp, 1);
}

TEST(MemoryModel, PipelineSlotsFollowTheSchedule) {
  Config c = tiny();
  c.model.n_layers = 4;
  c.parallel.pp = 2;
  c.train.batch_size = 4;         // 4 microbatches of 1
  c.parallel.schedule = "gpipe";  // every forward before any backward: all 4 in flight on both stages
  EXPECT_EQ(memory_model::slots_per_chunk(valid(c), memory_model::schedule_of(valid(c)), 0),
            std::vector<int64_t>{4});
  EXPECT_EQ(memory_model::slots_per_chunk(valid(c), memory_model::schedule_of(valid(c)), 1),
            std::vector<int64_t>{4});
  c.parallel.schedule = "1f1b";  // stage s warms up pp − s microbatches
  EXPECT_EQ(memory_model::slots_per_chunk(valid(c), memory_model::schedule_of(valid(c)), 0),
            std::vector<int64_t>{2});
  EXPECT_EQ(memory_model::slots_per_chunk(valid(c), memory_model::schedule_of(valid(c)), 1),
            std::vector<int64_t>{1});
}

TEST(MemoryModel, OneProcessByHand) {
  // N = 4 tokens, C = 32, head_dim 8, q 32, q|k|v 64, ffn 48, vocab 300.
  // Backward buffers: dres, dtmp 2·4·32 + dmid 4·48 + dqkv 4·64 + dgu 4·96 = 1088.
  // A layer: ln1 128, rstd1 4, qkv 256, att 128, lse 16, mid 128, ln2 128,
  // rstd2 4, gate|up 384, h 192 = 1368. The slot: 3 residuals of 128, two
  // layers, final norm 128 + 4, logits 1200, losses and lse 8: 4460.
  const RankMemory r = estimate_rank_memory(valid(tiny()), 0);
  const auto at = [&](MemKind k) { return r.lower[static_cast<size_t>(k)]; };
  EXPECT_EQ(at(MemKind::activation), (1088 + 4460) * 4);
  // Parameters: 2 layers of 7744, embedding and head 2 × 9600, final norm 32.
  EXPECT_EQ(at(MemKind::param), (15488 + 19200 + 32) * 4);
  EXPECT_EQ(at(MemKind::grad), at(MemKind::param));
  EXPECT_EQ(at(MemKind::optim), 2 * at(MemKind::param));  // AdamW m and v
  EXPECT_EQ(at(MemKind::scratch), 0);
  EXPECT_EQ(at(MemKind::comm), 0);
  EXPECT_EQ(r.lower, r.upper);  // one process: nothing in flight
  Config sgd = tiny();
  sgd.train.optimizer = "sgd";
  sgd.train.momentum = 0;
  EXPECT_EQ(estimate_rank_memory(valid(sgd), 0).lower[static_cast<size_t>(MemKind::optim)], 0);
  EXPECT_EQ(at(MemKind::ckpt_staging), 0);  // no train.checkpoint_dir
  EXPECT_EQ(at(MemKind::kv_cache), 0);      // training holds no KV cache
}

// A checkpoint writes every element of every parameter and of each optimizer
// state once over the whole mesh, so the ranks' staging copies add up to
// (1 + states) × the parameter count (34720, OneProcessByHand; the tied
// model's head is the embedding: 34720 − 9600) whatever the layout.
TEST(MemoryModel, CheckpointStagingAddsUpToTheStateOnce) {
  struct Case {
    int64_t dp, tp, pp, cp, zero;
    bool tied;
    const char* optimizer;
    int64_t states;
  };
  for (const Case& k : {Case{1, 1, 1, 1, 0, false, "adamw", 2}, Case{2, 1, 1, 1, 1, false, "adamw", 2},
                        Case{2, 2, 1, 1, 3, false, "adamw", 2}, Case{1, 2, 2, 1, 0, true, "sgd", 1},
                        Case{2, 1, 1, 2, 2, false, "lamb", 2}, Case{4, 1, 1, 1, 0, false, "adamw", 2}}) {
    Config c = tiny();
    c.model.tie_embeddings = k.tied;
    c.train.optimizer = k.optimizer;
    c.train.momentum = 0.9;
    c.train.checkpoint_dir = "ck";
    c.parallel.dp = k.dp;
    c.parallel.tp = k.tp;
    c.parallel.pp = k.pp;
    c.parallel.cp = k.cp;
    c.parallel.zero = k.zero;
    c.train.batch_size = 2 * k.dp;  // microbatches ≥ pp for 1f1b
    int64_t sum = 0;
    for (const RankMemory& r : estimate_all_ranks(valid(c))) {
      const size_t i = static_cast<size_t>(MemKind::ckpt_staging);
      EXPECT_EQ(r.lower[i], r.upper[i]);
      sum += r.lower[i];
    }
    const int64_t params = k.tied ? 34720 - 9600 : 34720;
    EXPECT_EQ(sum, (1 + k.states) * params * 4)
        << "dp " << k.dp << " tp " << k.tp << " pp " << k.pp << " cp " << k.cp << " zero " << k.zero;
  }
  // ZeRO 0 over dp 2: dp rank 0 writes it all, dp rank 1 nothing.
  Config c = tiny();
  c.train.checkpoint_dir = "ck";
  c.parallel.dp = 2;
  c.train.batch_size = 2;
  EXPECT_EQ(estimate_rank_memory(valid(c), 0).lower[static_cast<size_t>(MemKind::ckpt_staging)],
            3 * 34720 * 4);
  EXPECT_EQ(estimate_rank_memory(valid(c), 1).lower[static_cast<size_t>(MemKind::ckpt_staging)], 0);
}

// estimate_training_memory models tp rank 0 of each stage for its whole tp
// group: every tp coordinate must allocate the same, even with a vocabulary
// tp does not divide (301 rows over 4) and kv heads replicated (2 over tp 4).
TEST(MemoryModel, EveryTpCoordinateOfAStageHasTheSameBytes) {
  Config c = tiny();
  c.model.vocab_size = 301;
  c.model.n_layers = 4;
  c.train.batch_size = 4;
  c.parallel.tp = 4;
  c.parallel.pp = 2;
  c.parallel.dp = 2;
  c.parallel.zero = 3;
  for (int64_t stage = 0; stage < 2; ++stage) {
    const RankMemory first = estimate_rank_memory(valid(c), stage * 4);
    for (int64_t t = 1; t < 4; ++t) {
      const RankMemory r = estimate_rank_memory(valid(c), stage * 4 + t);
      EXPECT_EQ(r.lower, first.lower) << "stage " << stage << ", tp rank " << t;
      EXPECT_EQ(r.upper, first.upper) << "stage " << stage << ", tp rank " << t;
    }
  }
}

// estimate_ranks shares one parameter table among stages of the same shape;
// each rank alone (one chunk per rank: nothing shared) must give the same.
TEST(MemoryModel, SharedStageTablesGiveEachRanksOwnBytes) {
  Config c = tiny();
  c.model.n_layers = 7;  // stages of 2, 2, 2, 1 layers: first, middle, last differ
  c.train.batch_size = 8;
  c.parallel.pp = 4;
  c.parallel.dp = 2;
  c.parallel.zero = 2;
  const std::vector<RankMemory> all = estimate_all_ranks(valid(c));
  ASSERT_EQ(all.size(), 8u);
  for (int64_t r = 0; r < 8; ++r) {
    const RankMemory alone = estimate_rank_memory(valid(c), r);
    EXPECT_EQ(all[static_cast<size_t>(r)].lower, alone.lower) << "rank " << r;
    EXPECT_EQ(all[static_cast<size_t>(r)].upper, alone.upper) << "rank " << r;
  }
}

}  // namespace
}  // namespace mt

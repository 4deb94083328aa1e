// The canonical reduction mode (parallel.reduction = canonical;
// docs/PARALLELISM.md "The canonical mode"): every sum whose order a layout
// could change is taken in an order every layout reproduces, so that each
// supported layout is bitwise the one-process run.
//
//   batch:  the atom is one microbatch (train.microbatch_size sequences, the
//           grain, recorded in checkpoints); each unit's gradient is the
//           canonical tree (core/exact_sum.h) over the step's atoms:
//           CanonicalStore (canonical_store.h) over a rank's microbatches, the
//           DP all-reduce or ZeRO reduce-scatter by SumOrder::tree over the dp
//           ranks, which hold aligned blocks of atoms (a power of two each);
//   tp:     the grain c = parallel.canonical_tp (a power of two, recorded in
//           checkpoints): every sum over a tp-split dim is a tree over c fixed
//           pieces, c / tp on each rank, in one process too (canonical_tp.h);
//   2-D:    the d grain g = parallel.canonical_tp_d (a power of two dividing
//           d_model, recorded in checkpoints): every sum over the model width
//           a tree over g d pieces, every site cut on both dims
//           (canonical_tp_grid.h); a grid needs tp to divide g, 1-D tp > 1 g = 1;
//   scalars: the loss, the gradient norm and LAMB's per-tensor norms as exact
//           sums (ExactSum), whose value does not depend on any order or split.
//
//   sp:     the tokens of a microbatch cut into c fixed shards (what SP rank
//           p holds at tp = c): the norms' weight gradients are each shard's
//           sum, then the tree over shards, in one process too (linear_plan.h
//           NormEntry); the reduce-scatters that sum pieces use the tree.
//   overlap: tp_overlap's token chunks are the fixed GEMM blocks, each
//           chunk's sum the same tree (canonical_tp.h), with or without SP.
//   kv:     with c > n_kv_heads attention reads c kv slots, c / tp a rank,
//           and a kv head's gradient is the tree over its slots, in one
//           process too (canonical_tp_kv.h).
//   tied:   a tied matrix's gradient is the embedding's tree + the head's,
//           added once after the dp sums, on one stage (canonical_store.h)
//           as between the first and the last (train_step.cpp); under cp
//           each tree is over (microbatch, piece), as an untied weight's.
//   cp:     the grain C = parallel.canonical_cp (a power of two, recorded in
//           checkpoints): every sequence in 2·C zigzag chunks, piece p =
//           chunks {p, 2C−1−p}, C / cp pieces on each cp rank, in one process
//           too; attention over fixed key blocks merged in ascending order,
//           every weight gradient a tree over the pieces (cp_canonical.h).
//
// What does not yet have a canonical form is refused by name at start-up
// (check_canonical): cp with tp pieces, with several sequences a microbatch
// or several microbatches a dp rank (check_canonical_cp), experts under SP
// (their gradients are token shards' sums over tp) or under cp, an ep that is
// not a power of two (expert_canonical.h), the d grain with cp, kv slots or
// experts, and the oneDNN bf16 kernel (its accumulation order is the library's).
#pragma once

#include <cstdint>
#include <string_view>

namespace mt {

enum class Reduction { standard, canonical };

// "default" or "canonical" (parallel.reduction); ConfigError otherwise.
Reduction parse_reduction(std::string_view name);
const char* reduction_name(Reduction r);

// What check_canonical reads of a run.
struct CanonicalLayout {
  int64_t dp = 1, tp = 1, cp = 1, pp = 1, ep = 1;
  bool sp = false, tp_overlap = false, tp2d = false;
  bool experts = false, bf16_onednn = false;
  int64_t batch_size = 1, microbatch_size = 1;
  int64_t microbatch_tokens = 1;  // train.microbatch_size × train.seq_len
  int64_t canonical_tp = 1;       // parallel.canonical_tp
  int64_t n_heads = 1, n_kv_heads = 1, ffn_hidden = 1, vocab_size = 1;
  int64_t canonical_cp = 1;    // parallel.canonical_cp
  int64_t seq_len = 1;         // train.seq_len
  int64_t canonical_tp_d = 1;  // parallel.canonical_tp_d (canonical_tp_grid.h)
  int64_t d_model = 1;
};

// The refusals above; the batch rule: with dp > 1 each dp rank's atoms
// (batch_size / microbatch_size / dp) are a power of two, so that every rank
// holds an aligned subtree of the tree over the global atoms; and the tp
// rule: canonical_tp is a power of two dividing n_heads, ffn_hidden,
// vocab_size (a piece is what tp rank p holds at tp = c, unpadded) and the
// microbatch's tokens (the norms' shards), dividing n_kv_heads or (1-D)
// divided by it (kv slots, canonical_tp_kv.h), and tp divides it.
// The cp rule: check_canonical_cp in canonical.cpp.
// The 2-D rule: canonical_tp_d a power of two dividing d_model, which tp
// divides on a grid (R > 1) and is 1 under 1-D tp > 1.
void check_canonical(const CanonicalLayout& l);

// n a power of two (n ≥ 1).
bool is_power_of_two(int64_t n);

}  // namespace mt

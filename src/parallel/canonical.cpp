#include "parallel/canonical.h"

#include <utility>

#include "core/error.h"

namespace mt {

Reduction parse_reduction(std::string_view name) {
  if (name == "default") return Reduction::standard;
  if (name == "canonical") return Reduction::canonical;
  MT_THROW(ConfigError, "parallel.reduction ('", name, "') must be default or canonical");
}

const char* reduction_name(Reduction r) {
  return r == Reduction::canonical ? "canonical" : "default";
}

bool is_power_of_two(int64_t n) {
  return n >= 1 && (n & (n - 1)) == 0;
}

namespace {

// The first feature of `l` without a canonical form yet, or null.
const char* not_canonical_yet(const CanonicalLayout& l) {
  if (l.experts && l.sp && l.tp > 1)
    return "mixture-of-experts layers under sequence parallelism (model.n_experts > 0 with parallel.sp): "
           "each tp rank's router and expert gradients are its token shard's, summed over tp outside the "
           "tree";
  if (l.experts && (l.cp > 1 || l.canonical_cp > 1))
    return "mixture-of-experts layers under context parallelism (model.n_experts > 0 with parallel.cp or "
           "parallel.canonical_cp > 1): the experts' rows would be the cp pieces' rows, not in token order";
  if (l.canonical_tp_d > 1 && (l.cp > 1 || l.canonical_cp > 1 || l.experts || l.canonical_tp > l.n_kv_heads))
    return "the d grain (parallel.canonical_tp_d > 1) with context parallelism, experts or kv slots "
           "(canonical_tp > n_kv_heads): their pieces within the d pieces are not built yet";
  if (l.bf16_onednn)
    return "the oneDNN bf16 kernel (train.precision = bf16): its accumulation order is the library's; "
           "MESHTRAIN_BF16_MATMUL=emulated runs the emulated kernel, which the mode covers";
  return nullptr;
}

// The tp grain: each of the model's split widths is c pieces, and tp ranks hold aligned blocks of them.
void check_canonical_tp(const CanonicalLayout& l) {
  const int64_t c = l.canonical_tp;
  MT_REQUIRE(is_power_of_two(c), ConfigError, "parallel.canonical_tp (", c,
             ") must be a power of two: tp ranks must hold aligned subtrees of the tree over its pieces");
  const std::pair<const char*, int64_t> dims[] = {
      {"model.n_heads", l.n_heads}, {"model.ffn_hidden", l.ffn_hidden}, {"model.vocab_size", l.vocab_size}};
  for (const auto& [key, n] : dims) {
    MT_REQUIRE(n % c == 0, ConfigError, "parallel.canonical_tp (", c, ") must divide ", key, " (", n,
               "): each piece is what tp rank p holds at tp = canonical_tp, without padding");
  }
  // More pieces than kv heads: each piece's kv slot holds the kv head of its query heads
  // (canonical_tp_kv.h), which needs the kv heads to divide the pieces; a grid never replicates them.
  const int64_t kv = l.n_kv_heads;
  MT_REQUIRE(kv % c == 0 || (!l.tp2d && c % kv == 0), ConfigError, "parallel.canonical_tp (", c,
             ") and model.n_kv_heads (", kv, "): one must divide the other",
             l.tp2d ? " and, on a 2-D grid, canonical_tp must divide n_kv_heads" : "",
             " (a piece holds n_kv_heads / canonical_tp kv heads, or a slot of one)");
  MT_REQUIRE(c == 1 || l.microbatch_tokens % c == 0, ConfigError, "parallel.canonical_tp (", c,
             ") must divide a microbatch's tokens (train.microbatch_size x train.seq_len = ",
             l.microbatch_tokens, "): the norms' weight gradients sum over that many fixed token shards");
  MT_REQUIRE(c % l.tp == 0, ConfigError, "parallel.tp (", l.tp, ") must divide parallel.canonical_tp (", c,
             ") in the canonical mode: each tp rank sums its canonical_tp / tp pieces, an aligned subtree "
             "(docs/PARALLELISM.md \"The canonical mode\")");
}

// The cp grain C: each sequence is 2·C zigzag chunks, piece p = chunks {p, 2C−1−p}, and cp ranks
// hold aligned blocks of C / cp pieces (parallel/cp_canonical.h).
void check_canonical_cp(const CanonicalLayout& l) {
  const int64_t c = l.canonical_cp;
  MT_REQUIRE(is_power_of_two(c), ConfigError, "parallel.canonical_cp (", c,
             ") must be a power of two: cp ranks must hold aligned subtrees of the tree over its pieces");
  MT_REQUIRE(c % l.cp == 0, ConfigError, "parallel.cp (", l.cp, ") must divide parallel.canonical_cp (", c,
             ") in the canonical mode: each cp rank holds canonical_cp / cp pieces of every sequence, an "
             "aligned subtree (docs/PARALLELISM.md \"The canonical mode\")");
  if (c == 1) return;
  MT_REQUIRE(l.seq_len % (2 * c) == 0 && (l.seq_len / c) % 128 == 0, ConfigError, "parallel.canonical_cp (",
             c, ") needs train.seq_len (", l.seq_len,
             ") / canonical_cp to be a multiple of 128: a piece's rows must be whole fixed GEMM blocks, so "
             "that every product over tokens is the same OpenBLAS calls in every layout");
  MT_REQUIRE(l.microbatch_size == 1, ConfigError, "parallel.canonical_cp (", c,
             ") needs train.microbatch_size = 1, not ", l.microbatch_size,
             ": a piece of a microbatch of several sequences is not one block of rows");
  MT_REQUIRE(l.canonical_tp == 1, ConfigError, "parallel.canonical_cp (", c, ") with parallel.canonical_tp (",
             l.canonical_tp,
             "): cp pieces within tp pieces (the norms' token shards of both) are not built "
             "yet");
  const int64_t per_rank = l.batch_size / l.microbatch_size / l.dp;
  MT_REQUIRE(l.cp == 1 || per_rank == 1, ConfigError, "parallel.cp (", l.cp,
             ") in the canonical mode needs one microbatch a dp rank (train.batch_size ", l.batch_size,
             " = parallel.dp ", l.dp,
             " x train.microbatch_size): the sum over cp ranks of each microbatch's "
             "pieces must come before the tree over microbatches, and the store sums over dp x cp once a "
             "step");
}

// The d grain (canonical_tp_grid.h): d is g pieces; a grid's tp ranks hold aligned blocks of them.
void check_canonical_tp_d(const CanonicalLayout& l) {
  const int64_t g = l.canonical_tp_d;
  MT_REQUIRE(is_power_of_two(g) && l.d_model % g == 0, ConfigError, "parallel.canonical_tp_d (", g,
             ") must be a power of two dividing model.d_model (", l.d_model,
             "): each d piece is what tp rank q holds of the residual stream at tp = canonical_tp_d");
  MT_REQUIRE(!l.tp2d || (g > 1 && g % l.tp == 0), ConfigError, "parallel.tp2d with parallel.tp (", l.tp,
             ") in the canonical mode needs parallel.canonical_tp_d (", g,
             ") to be a multiple of tp: the grid splits the model width, and each rank's share of it must be "
             "whole d pieces, an aligned subtree (docs/PARALLELISM.md \"The canonical mode\")");
  MT_REQUIRE(l.tp2d || l.tp == 1 || g == 1, ConfigError, "parallel.canonical_tp_d (", g,
             ") with 1-D parallel.tp (", l.tp,
             ") is not built: 1-D tp keeps the model width whole, so its sums are not cut into d pieces; "
             "run the grid \"1,",
             l.tp, "\" only with canonical_tp_d = 1, or one process");
}

}  // namespace

void check_canonical(const CanonicalLayout& l) {
  const char* missing = not_canonical_yet(l);
  MT_REQUIRE(missing == nullptr, ConfigError, "parallel.reduction = canonical does not cover ", missing,
             " (docs/PARALLELISM.md \"The canonical mode\")");
  const int64_t atoms = l.batch_size / l.microbatch_size;  // validate checks that it divides
  MT_REQUIRE(l.dp == 1 || (atoms % l.dp == 0 && is_power_of_two(atoms / l.dp)), ConfigError,
             "parallel.reduction = canonical needs each dp rank's microbatches (train.batch_size ",
             l.batch_size, " / train.microbatch_size ", l.microbatch_size, " / parallel.dp ", l.dp,
             ") to be a power of two: every rank must hold an aligned subtree of the tree over the step's ",
             atoms, " microbatches (docs/PARALLELISM.md \"The canonical mode\")");
  MT_REQUIRE(l.ep == 1 || is_power_of_two(l.ep), ConfigError, "parallel.ep (", l.ep,
             ") must be a power of two in the canonical mode: an expert's holder sums the ep x microbatches "
             "atoms of its ep group, which must be an aligned subtree of the tree over the step's atoms");
  check_canonical_tp(l);
  check_canonical_cp(l);
  check_canonical_tp_d(l);
}

}  // namespace mt

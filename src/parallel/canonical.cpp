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
  if (l.tp > l.n_kv_heads)
    return "kv heads replicated over tp (parallel.tp > model.n_kv_heads): their replicas' gradient sum is "
           "not yet in the tree";
  if (l.cp > 1)
    return "context parallelism (parallel.cp > 1): its key blocks are not yet merged in a fixed order";
  if (l.experts || l.ep > 1)
    return "mixture-of-experts layers (model.n_experts > 0): their token order and per-microbatch router "
           "terms "
           "are not yet canonical";
  if (l.tied_embeddings && l.pp > 1)
    return "tied embeddings over pipeline stages (model.tie_embeddings with parallel.pp > 1): the two "
           "copies' "
           "gradients would be summed outside the tree";
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
  const std::pair<const char*, int64_t> dims[] = {{"model.n_heads", l.n_heads},
                                                  {"model.n_kv_heads", l.n_kv_heads},
                                                  {"model.ffn_hidden", l.ffn_hidden},
                                                  {"model.vocab_size", l.vocab_size}};
  for (const auto& [key, n] : dims) {
    MT_REQUIRE(n % c == 0, ConfigError, "parallel.canonical_tp (", c, ") must divide ", key, " (", n,
               "): each piece is what tp rank p holds at tp = canonical_tp, without padding");
  }
  MT_REQUIRE(c == 1 || l.microbatch_tokens % c == 0, ConfigError, "parallel.canonical_tp (", c,
             ") must divide a microbatch's tokens (train.microbatch_size x train.seq_len = ",
             l.microbatch_tokens, "): the norms' weight gradients sum over that many fixed token shards");
  MT_REQUIRE(c % l.tp == 0, ConfigError, "parallel.tp (", l.tp, ") must divide parallel.canonical_tp (", c,
             ") in the canonical mode: each tp rank sums its canonical_tp / tp pieces, an aligned subtree "
             "(docs/PARALLELISM.md \"The canonical mode\")");
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
  check_canonical_tp(l);
  check_canonical_tp_d(l);
}

}  // namespace mt

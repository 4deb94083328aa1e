#include "parallel/canonical.h"

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
  if (l.tp > 1 || l.sp || l.tp_overlap || l.tp2d)
    return "tensor parallelism (parallel.tp > 1, sp, tp_overlap, tp2d): its row-parallel sums over K are not "
           "yet cut into fixed chunks";
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
}

}  // namespace mt

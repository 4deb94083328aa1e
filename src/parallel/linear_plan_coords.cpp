// The global columns of a site's activations, for --fingerprint
// (parallel/probe.h): what the plan entries know of how each side of a linear
// site is split over tp.
#include "core/error.h"
#include "parallel/linear_plan.h"

namespace mt::tp {

namespace {

// The output blocks of a column entry under 1-D tp: block b of local width w
// is piece r of a global block of w·tp columns, or, for a kv block replicated
// on the kv group's ranks, piece r / replicas of w·tp / replicas columns.
std::vector<ColumnSpan> column_blocks(const LinearEntry& e, bool grad) {
  const int64_t tp = e.tp ? e.tp->size() : 1, r = e.tp ? e.tp->rank() : 0;
  std::vector<ColumnSpan> spans;
  int64_t local = 0, global = 0;
  for (const int64_t w : e.out_blocks) {
    const bool kv = e.kv != nullptr && local >= e.kv_first && local < e.kv_first + e.kv_count;
    const int64_t replicas = kv ? e.kv->size() : 1;
    const int block = e.out_blocks.size() > 1 ? static_cast<int>(spans.size()) : -1;
    spans.push_back({local, global + (r / replicas) * w, w, block, grad && replicas > 1});
    local += w;
    global += w * tp / replicas;
  }
  return spans;
}

}  // namespace

std::vector<ColumnSpan> LinearPlan::columns(const LinearEntry* e, bool out, bool grad) const {
  MT_REQUIRE(form_ != Form::grid, ConfigError,
             "--fingerprint does not place the activations of 2-D tensor parallelism (parallel.tp2d) at "
             "global coordinates yet");
  if (e == nullptr) return {{0, 0, norms_.width}};
  if (e->form == Form::local) return out ? column_blocks(*e, grad) : std::vector<ColumnSpan>{{0, 0, e->in}};
  if (e->use == SiteUse::head && out) {  // this rank's rows of the vocabulary (the embedding's split)
    for (const LinearEntry& x : entries_) {
      if (x.use == SiteUse::embedding)
        return {{0, x.vocab_rows.begin, x.vocab_rows.end - x.vocab_rows.begin}};
    }
    MT_THROW(Error, "the linear plan has no embedding entry for the head's vocabulary split");
  }
  const bool sharded_side = (e->role == Role::row) != out;  // a row layer's input, a column layer's output
  if (!sharded_side) return {{0, 0, out ? e->out : e->in}};
  if (e->role == Role::row) return {{0, e->tp->rank() * e->in, e->in}};
  return column_blocks(*e, grad);
}

}  // namespace mt::tp

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

// The output blocks of a canonical q|k|v with kv slots (canonical_tp_kv.h):
// the query block as a column block; k and v one span per slot, at its kv
// head's columns. A head's slots hold one value forward (a copy), so only the
// first of them over all ranks is placed; backward each is an addend.
std::vector<ColumnSpan> slot_blocks(const LinearEntry& e, bool grad) {
  const KvSlots& kv = e.slots;
  const int64_t tp = e.tp ? e.tp->size() : 1, r = e.tp ? e.tp->rank() : 0, D = kv.head_dim;
  const int64_t Q = e.out_blocks.front(), per_head = kv.slots * tp / kv.total;  // a head's slots, all ranks
  std::vector<ColumnSpan> spans{{0, r * Q, Q, 0, false}};
  for (int block = 1; block <= 2; ++block) {
    const int64_t local0 = Q + (block - 1) * kv.slots * D, global0 = Q * tp + (block - 1) * kv.total * D;
    for (int64_t j = 0; j < kv.slots; ++j) {
      const int64_t head = kv.head0 + j / kv.per_head();
      const bool first = (r * kv.slots + j) % per_head == 0;
      spans.push_back({local0 + j * D, global0 + head * D, D, block, grad || !first});
    }
  }
  return spans;
}

// On an R × C grid (docs/PARALLELISM.md "2-D tensor parallelism"): the
// sharded side of a linear site (a column layer's output after its
// reduce-scatter, a row layer's input before its all-gather) holds, of each
// fused block, block c·R + r of R·C (heads, hidden channels); c and r are
// the entry's tp_c and tp_r coordinates.
std::vector<ColumnSpan> grid_blocks(const LinearEntry& e, bool out) {
  const bool row = e.role == Role::row;
  const Group& tp_r = row ? *e.gather : *e.scatter;
  const Group& tp_c = row ? *e.scatter : *e.gather;
  const int64_t R = tp_r.size(), RC = R * tp_c.size(), at = tp_c.rank() * R + tp_r.rank();
  const std::vector<int64_t> widths = out ? e.out_blocks : std::vector<int64_t>{e.in};
  std::vector<ColumnSpan> spans;
  int64_t local = 0, global = 0;
  for (const int64_t gathered : widths) {
    const int64_t w = gathered / R;  // the gathered width over tp_r is R blocks
    spans.push_back({local, global + at * w, w, widths.size() > 1 ? static_cast<int>(spans.size()) : -1});
    local += w;
    global += w * RC;
  }
  return spans;
}

}  // namespace

std::vector<ColumnSpan> LinearPlan::columns(const LinearEntry* e, bool out, bool grad) const {
  if (form_ == Form::grid) {  // the residual stream: block t = r·C + c of d over tp
    const ColumnSpan resid{0, norms_.sums->rank() * norms_.width, norms_.width};
    const bool sharded_side = e != nullptr && e->use == SiteUse::linear && (e->role == Role::row) != out;
    return sharded_side ? grid_blocks(*e, out) : std::vector<ColumnSpan>{resid};
  }
  if (e == nullptr) return {{0, 0, norms_.width}};
  if (e->slots.on() && out) return slot_blocks(*e, grad);
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

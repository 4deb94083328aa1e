// The canonical mode's q|k|v site when its grain has more pieces than the
// model has kv heads (c = parallel.canonical_tp > n_kv_heads;
// docs/PARALLELISM.md "The canonical mode"). A kv head is then shared by the
// c / n_kv_heads pieces whose query heads read it, and its gradient is a sum
// over those pieces that no layout may regroup.
//
// So every layout, one process included, runs attention with the kv heads
// expanded to slots: this rank's c / tp pieces each get a k and a v slot,
// slot j holding the kv head of piece j's query heads (its GEMM for the first
// slot of a head, a copy for the others). Attention then reads c / tp kv heads
// with H / c query heads each, and its backward leaves in slot j the sum over
// piece j's query heads only — what tp rank p computes at tp = c, where the
// slot is the rank's one kv head. From the slots:
//   - the input gradient of piece j reads its own slot: dq_j·Wq_j, then
//     dk_j·Wk_h, then dv_j·Wv_h, accumulated in block order (one GEMM each,
//     of the same shape in every layout), and the pieces' tree, then over tp,
//     as every canonical column layer (canonical_tp.h);
//   - a kv head's weight gradient is the canonical tree over its slots'
//     products dk_jᵀ·x (and dv_jᵀ·x): this rank's aligned block of them, then
//     over the ranks that hold the head (the kv replicas, tp > n_kv_heads) by
//     SumOrder::tree — the tree of the one-process run, whatever the tp.
//
// The weights are unchanged ([Q + 2·KVl·D, IC] on a rank, its KVl kv heads);
// only the activation q|k|v is [N, Q + 2·S·D] with S = c / tp slots.
#pragma once

#include <cstdint>
#include <string_view>

#include "comm/group.h"
#include "parallel/canonical_tp.h"

namespace mt::tp {

// The kv slots of a canonical q|k|v site; slots 0: none (the kv heads as they are).
struct KvSlots {
  int64_t slots = 0;     // this rank's kv slots: its pieces, c / tp
  int64_t heads = 0;     // the kv heads this rank's weight holds (KVl)
  int64_t head0 = 0;     // the global index of the first of them
  int64_t head_dim = 0;  // D
  int64_t total = 0;     // the model's kv heads (n_kv_heads)

  bool on() const { return slots > 0; }
  int64_t per_head() const { return slots / heads; }  // consecutive slots of one kv head
};

// How many kv heads this rank's attention reads: `kv_heads_here` (its weight's),
// or with c = canonical_tp > n_kv_heads (the canonical mode) its c / tp slots.
int64_t attention_kv_heads(int64_t kv_heads_here, int64_t canonical_tp, int64_t n_kv_heads, int64_t tp);

// out [N, Q + 2·S·D] = inp [N, IC] · w [Q + 2·KVl·D, IC]ᵀ per piece: the
// piece's query rows, and its k and v slots (no communication).
void slots_qkv_forward(float* out, const float* inp, const float* w, int64_t N, int64_t IC, int64_t Q,
                       const KvSlots& kv, const Pieces& p);

// dinp [N, IC] (SP: [N / tp, IC]) = the tree over pieces of each piece's
// blocks (above), then over tp (null: skipped, on every rank alike); dw
// [Q + 2·KVl·D, IC] += the query rows per piece and each kv head's tree over
// its slots, summed over `replicas` (null: none) by SumOrder::tree (null dw:
// skipped). scratch: [S, 2·D, IC], the slots' weight-gradient products.
void slots_qkv_backward(float* dinp, float* dw, float* scratch, const float* dout, const float* inp,
                        const float* w, int64_t N, int64_t IC, int64_t Q, const KvSlots& kv, Group* replicas,
                        std::string_view kv_site, const Pieces& p);

}  // namespace mt::tp

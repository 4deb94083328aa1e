#include "parallel/canonical_tp_kv.h"

#include <string>

#include "core/device.h"
#include "core/error.h"
#include "core/exact_sum.h"
#include "ops/gemm.h"
#include "ops/primitives.h"
#include "parallel/tp_comm.h"

namespace mt::tp {

namespace {

// The widths of one canonical q|k|v site: query rows of a piece, the output row
// and the weight's k and v rows of local kv head h.
struct SlotWidths {
  int64_t Q, pw, OA, D, S, KVl;
  int64_t k_row(int64_t h) const { return Q + h * D; }
  int64_t v_row(int64_t h) const { return Q + (KVl + h) * D; }
};

SlotWidths widths(int64_t Q, const KvSlots& kv, const Pieces& p) {
  MT_CHECK(kv.on() && p.count == kv.slots && kv.slots % kv.heads == 0 && Q % p.count == 0,
           "canonical kv slots (", kv.slots, " for ", kv.heads, " kv heads) do not match ", p.count,
           " pieces of ", Q, " query features at site ", std::string(p.site));
  return {Q, Q / p.count, Q + 2 * kv.slots * kv.head_dim, kv.head_dim, kv.slots, kv.heads};
}

}  // namespace

int64_t attention_kv_heads(int64_t kv_heads_here, int64_t canonical_tp, int64_t n_kv_heads, int64_t tp) {
  return canonical_tp > n_kv_heads ? canonical_tp / tp : kv_heads_here;
}

void slots_qkv_forward(float* out, const float* inp, const float* w, int64_t N, int64_t IC, int64_t Q,
                       const KvSlots& kv, const Pieces& p) {
  const SlotWidths s = widths(Q, kv, p);
  for (int64_t j = 0; j < s.S; ++j) {
    sgemm(Trans::no, Trans::yes, N, s.pw, IC, inp, IC, w + j * s.pw * IC, IC, out + j * s.pw, s.OA,
          Out::assign);
    const int64_t h = j / kv.per_head(), first = h * kv.per_head();
    float* k = out + Q + j * s.D;
    float* v = out + Q + (s.S + j) * s.D;
    if (j == first) {  // the head's GEMMs, the same (N, D, IC) in every layout
      sgemm(Trans::no, Trans::yes, N, s.D, IC, inp, IC, w + s.k_row(h) * IC, IC, k, s.OA, Out::assign);
      sgemm(Trans::no, Trans::yes, N, s.D, IC, inp, IC, w + s.v_row(h) * IC, IC, v, s.OA, Out::assign);
    } else {  // a copy of the head's first slot
      copy_rows(k, s.OA, out + Q + first * s.D, s.OA, N, s.D);
      copy_rows(v, s.OA, out + Q + (s.S + first) * s.D, s.OA, N, s.D);
    }
  }
}

namespace {

// dw += the query rows per piece, then each local kv head's tree over its
// slots' products (scratch [S, 2·D, IC]: slot j's dkᵀ·x, then dvᵀ·x), summed
// over the replicas by the tree.
void slots_weight_grad(float* dw, float* scratch, const float* dout, const float* inp, int64_t N, int64_t IC,
                       int64_t Q, const KvSlots& kv, Group* replicas, std::string_view kv_site,
                       const Pieces& p) {
  const SlotWidths s = widths(Q, kv, p);
  const int64_t leaf = 2 * s.D * IC, per = kv.per_head();
  for (int64_t j = 0; j < s.S; ++j) {
    sgemm(Trans::yes, Trans::no, s.pw, IC, N, dout + j * s.pw, s.OA, inp, IC, dw + j * s.pw * IC, IC,
          Out::add);
    float* l = scratch + j * leaf;
    sgemm(Trans::yes, Trans::no, s.D, IC, N, dout + Q + j * s.D, s.OA, inp, IC, l, IC, Out::assign);
    sgemm(Trans::yes, Trans::no, s.D, IC, N, dout + Q + (s.S + j) * s.D, s.OA, inp, IC, l + s.D * IC, IC,
          Out::assign);
  }
  for (int64_t h = 0; h < kv.heads; ++h) {
    float* root = scratch + h * per * leaf;  // the tree over the head's slots, in its first leaf
    if (per > 1) sum_in_tree_order(root, root, static_cast<int>(per), leaf);
    if (replicas != nullptr && replicas->size() > 1)
      replicas->all_reduce(root, leaf, ElemType::f32, SumOrder::tree,
                           comm_label(kv_site, "replica grads", "backward", {2 * s.D, IC}));
    add(dw + s.k_row(h) * IC, root, s.D * IC);
    add(dw + s.v_row(h) * IC, root + s.D * IC, s.D * IC);
  }
}

}  // namespace

void slots_qkv_backward(float* dinp, float* dw, float* scratch, const float* dout, const float* inp,
                        const float* w, int64_t N, int64_t IC, int64_t Q, const KvSlots& kv, Group* replicas,
                        std::string_view kv_site, const Pieces& p) {
  const SlotWidths s = widths(Q, kv, p);
  const auto wgrad = [&] {
    if (dw == nullptr) return;
    MT_CHECK(scratch != nullptr, "canonical kv slots need scratch [slots, 2·D, IC] at site ",
             std::string(p.site));
    slots_weight_grad(dw, scratch, dout, inp, N, IC, Q, kv, replicas, kv_site, p);
  };
  if (dinp == nullptr) return wgrad();
  const PieceRows gemm = [&](int64_t j, int64_t r0, int64_t rows, float* into) {
    const int64_t h = j / kv.per_head();
    const float* d = dout + r0 * s.OA;
    sgemm(Trans::no, Trans::no, rows, IC, s.pw, d + j * s.pw, s.OA, w + j * s.pw * IC, IC, into, IC,
          Out::assign);
    sgemm(Trans::no, Trans::no, rows, IC, s.D, d + Q + j * s.D, s.OA, w + s.k_row(h) * IC, IC, into, IC,
          Out::add);
    sgemm(Trans::no, Trans::no, rows, IC, s.D, d + Q + (s.S + j) * s.D, s.OA, w + s.v_row(h) * IC, IC, into,
          IC, Out::add);
  };
  sum_piece_rows(dinp, N, IC, p, gemm, p.sp ? "gather_from_sp" : "copy_to_tp", "backward", wgrad);
}

}  // namespace mt::tp

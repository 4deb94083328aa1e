#include "parallel/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/device_mirror.h"
#include "core/error.h"
#include "mesh/layout.h"
#include "parallel/tp_comm.h"

namespace mt::tp {

VocabShard vocab_shard(int64_t V, int tp, int rank) {
  const auto [begin, end] = shard_range(V, tp, rank);
  return VocabShard{begin, end, padded_shard_size(V, tp)};
}

void vocab_embedding_forward(float* out, float* scratch, const int32_t* ids, const float* table_local,
                             int64_t N, int64_t C, int64_t V, const TpLayer& layer) {
  MT_CHECK(layer.group != nullptr, "vocab_embedding_forward needs a tp group");
  Group& tp = *layer.group;
  const VocabShard vs = vocab_shard(V, tp.size(), tp.rank());
  const bool sp = layer.sp == SequenceParallel::on;
  MT_CHECK(!sp || scratch != nullptr, "vocab_embedding_forward under SP needs scratch [N, C]");
  float* p = sp ? scratch : out;
  vocab_lookup(p, ids, table_local, N, C, V, vs);
  if (sp)
    scatter_to_sp_forward(out, p, N, C, tp, layer.site);
  else
    reduce_from_tp_forward(out, N, C, tp, layer.site);
}

void vocab_embedding_backward(float* dtable_local, float* scratch, const float* dout, const int32_t* ids,
                              int64_t N, int64_t C, int64_t V, const TpLayer& layer) {
  MT_CHECK(layer.group != nullptr, "vocab_embedding_backward needs a tp group");
  Group& tp = *layer.group;
  const VocabShard vs = vocab_shard(V, tp.size(), tp.rank());
  const float* g = dout;
  if (layer.sp == SequenceParallel::on) {
    MT_CHECK(scratch != nullptr, "vocab_embedding_backward under SP needs scratch [N, C]");
    scatter_to_sp_backward(scratch, dout, N, C, tp, layer.site);
    g = scratch;
  } else {
    reduce_from_tp_backward(dout, N, C, tp, layer.site);
  }
  vocab_lookup_backward(dtable_local, g, ids, N, C, V, vs);
}

void vocab_cross_entropy_forward(float* losses, float* lse, const float* logits_local, const int32_t* targets,
                                 int64_t N, int64_t V, int32_t ignore_index, Group& tp,
                                 std::string_view site) {
  const VocabShard vs = vocab_shard(V, tp.size(), tp.rank());
  DeviceScratch<double> max(N), sum(N), target(N);  // per token, on the device
  double *mx = max.data(), *sm = sum.data(), *tg = target.data();
  vocab_ce_max(mx, logits_local, N, vs);
  tp.all_reduce(mx, N, comm_label(site, "vocab_ce max", "forward", {N}), ReduceOp::max);
  vocab_ce_sums(sm, tg, logits_local, targets, mx, N, V, ignore_index, vs);
  tp.all_reduce(sm, N, comm_label(site, "vocab_ce sumexp", "forward", {N}));
  tp.all_reduce(tg, N, comm_label(site, "vocab_ce target", "forward", {N}));
  vocab_ce_finish(losses, lse, mx, sm, tg, targets, N, ignore_index);
}

void vocab_cross_entropy_backward(float* dlogits_local, const float* logits_local, const float* lse,
                                  const int32_t* targets, float dloss, int64_t N, int64_t V,
                                  int32_t ignore_index, Group& tp) {
  vocab_ce_backward(dlogits_local, logits_local, lse, targets, dloss, N, V, ignore_index,
                    vocab_shard(V, tp.size(), tp.rank()));
}

}  // namespace mt::tp

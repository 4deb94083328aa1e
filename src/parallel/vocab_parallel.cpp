#include "parallel/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.h"
#include "mesh/layout.h"
#include "parallel/tp_comm.h"

namespace mt::tp {

namespace {

void check_ids(const int32_t* ids, int64_t N, int64_t V, int32_t ignore_index, bool allow_ignore) {
  for (int64_t n = 0; n < N; ++n) {
    const int32_t t = ids[n];
    MT_CHECK((allow_ignore && t == ignore_index) || (t >= 0 && t < V), "id ", t, " of token ", n,
             " is outside [0, ", V, ")");
  }
}

}  // namespace

VocabShard vocab_shard(int64_t V, int tp, int rank) {
  const auto [begin, end] = shard_range(V, tp, rank);
  return VocabShard{begin, end, padded_shard_size(V, tp)};
}

void vocab_lookup(float* out, const int32_t* ids, const float* table_local, int64_t N, int64_t C, int64_t V,
                  const VocabShard& vs) {
  check_ids(ids, N, V, -1, false);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = ids[n];
    float* row = out + n * C;
    if (id >= vs.begin && id < vs.end)
      std::memcpy(row, table_local + (id - vs.begin) * C, sizeof(float) * static_cast<size_t>(C));
    else
      std::fill(row, row + C, 0.0f);
  }
}

void vocab_lookup_backward(float* dtable_local, const float* dout, const int32_t* ids, int64_t N, int64_t C,
                           int64_t V, const VocabShard& vs) {
  check_ids(ids, N, V, -1, false);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = ids[n];
    if (id < vs.begin || id >= vs.end) continue;
    float* row = dtable_local + (id - vs.begin) * C;
    const float* d = dout + n * C;
    for (int64_t c = 0; c < C; ++c)
      row[c] += d[c];
  }
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
  check_ids(targets, N, V, ignore_index, true);
  const VocabShard vs = vocab_shard(V, tp.size(), tp.rank());
  const int64_t Vl = vs.rows, real = vs.end - vs.begin;  // columns [real, Vl) are padding: never read
  std::vector<double> max(static_cast<size_t>(N)), sum(static_cast<size_t>(N)),
      target(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits_local + n * Vl;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < real; ++v)
      m = std::max(m, static_cast<double>(x[v]));
    max[static_cast<size_t>(n)] = m;
  }
  tp.all_reduce(max.data(), N, comm_label(site, "vocab_ce max", "forward", {N}), ReduceOp::max);
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits_local + n * Vl;
    const double m = max[static_cast<size_t>(n)];
    double s = 0.0;
    for (int64_t v = 0; v < real; ++v)
      s += std::exp(static_cast<double>(x[v]) - m);
    sum[static_cast<size_t>(n)] = s;
    const int64_t t = targets[n];
    target[static_cast<size_t>(n)] =
        (t != ignore_index && t >= vs.begin && t < vs.end) ? static_cast<double>(x[t - vs.begin]) : 0.0;
  }
  tp.all_reduce(sum.data(), N, comm_label(site, "vocab_ce sumexp", "forward", {N}));
  tp.all_reduce(target.data(), N, comm_label(site, "vocab_ce target", "forward", {N}));
  for (int64_t n = 0; n < N; ++n) {
    const size_t i = static_cast<size_t>(n);
    const double l = max[i] + std::log(sum[i]);
    lse[n] = static_cast<float>(l);
    losses[n] = targets[n] == ignore_index ? 0.0f : static_cast<float>(l - target[i]);
  }
}

void vocab_cross_entropy_backward(float* dlogits_local, const float* logits_local, const float* lse,
                                  const int32_t* targets, float dloss, int64_t N, int64_t V,
                                  int32_t ignore_index, Group& tp) {
  check_ids(targets, N, V, ignore_index, true);
  const VocabShard vs = vocab_shard(V, tp.size(), tp.rank());
  const int64_t Vl = vs.rows, real = vs.end - vs.begin;
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits_local + n * Vl;
    float* d = dlogits_local + n * Vl;  // may alias x: each element is read before it is written
    const int32_t t = targets[n];
    if (t == ignore_index) {
      std::fill(d, d + Vl, 0.0f);
      continue;
    }
    const double l = lse[n];
    for (int64_t v = 0; v < real; ++v)
      d[v] = static_cast<float>(dloss * std::exp(static_cast<double>(x[v]) - l));
    std::fill(d + real, d + Vl, 0.0f);
    if (t >= vs.begin && t < vs.end) d[t - vs.begin] -= dloss;
  }
}

}  // namespace mt::tp

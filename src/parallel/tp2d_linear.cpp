#include "parallel/tp2d_linear.h"

#include <string>

#include "core/device_mirror.h"
#include "core/error.h"
#include "ops/gemm.h"
#include "ops/primitives.h"
#include "ops/split_rmsnorm.h"
#include "parallel/tp_comm.h"

namespace mt::tp2d {

namespace {

// The fused blocks of a k-wide feature dim, each checked to split over g ranks.
Blocks checked(const Blocks& blocks, int64_t k, int g) {
  Blocks b = blocks.empty() ? Blocks{k} : blocks;
  int64_t sum = 0;
  for (int64_t s : b) {
    MT_CHECK(s % g == 0, "a feature block of ", s, " does not split over ", g, " ranks");
    sum += s;
  }
  MT_CHECK(sum == k, "feature blocks sum to ", sum, ", not the dim's ", k);
  return b;
}

// Between [N, k] (features in block order) and g rank-major slabs [N, k/g]:
// slab j holds the j-th g-th of every block, one strided block copy per piece.
void pack(float* slabs, const float* wide, int64_t N, int64_t k, const Blocks& blocks, int g) {
  const int64_t kl = k / g;
  int64_t off = 0, loff = 0;  // the block's first feature in [N, k] and in a slab
  for (int64_t s : blocks) {
    const int64_t part = s / g;
    for (int j = 0; j < g; ++j)
      copy_rows(slabs + j * N * kl + loff, kl, wide + off + j * part, k, N, part);
    off += s;
    loff += part;
  }
}

void unpack(float* wide, const float* slabs, int64_t N, int64_t k, const Blocks& blocks, int g) {
  const int64_t kl = k / g;
  int64_t off = 0, loff = 0;
  for (int64_t s : blocks) {
    const int64_t part = s / g;
    for (int j = 0; j < g; ++j)
      copy_rows(wide + off + j * part, k, slabs + j * N * kl + loff, kl, N, part);
    off += s;
    loff += part;
  }
}

void copy(float* dst, const float* src, int64_t n) {
  copy_bytes(dst, src, n * int64_t{sizeof(float)});
}

std::string label_of(std::string_view site, const char* pair, const char* dir, int64_t rows, int64_t cols) {
  return tp::comm_label(site, pair, dir, {rows, cols});
}

}  // namespace

void gather_features(float* out, float* scratch, const float* inp, int64_t N, int64_t k, const Blocks& blocks,
                     Group& g, std::string_view label) {
  const int P = g.size();
  if (P == 1) return copy(out, inp, N * k);
  const Blocks b = checked(blocks, k, P);
  g.all_gather(inp, scratch, N * (k / P), ElemType::f32, label);
  unpack(out, scratch, N, k, b, P);
}

void scatter_features(float* out, float* scratch, const float* inp, int64_t N, int64_t k,
                      const Blocks& blocks, Group& g, std::string_view label) {
  const int P = g.size();
  if (P == 1) return copy(out, inp, N * k);
  const Blocks b = checked(blocks, k, P);
  pack(scratch, inp, N, k, b, P);
  g.reduce_scatter(scratch, out, N * (k / P), ElemType::f32, ReduceOp::sum, label);
}

void scatter_features_tree(float* out, float* scratch, const float* inp, int64_t N, int64_t k,
                           const Blocks& blocks, Group& g, std::string_view label) {
  const int P = g.size();
  if (P == 1) return copy(out, inp, N * k);
  const Blocks b = checked(blocks, k, P);
  pack(scratch, inp, N, k, b, P);
  g.reduce_scatter(scratch, out, N * (k / P), ElemType::f32, SumOrder::tree, label);
}

void linear2d_forward(float* out, float* x_full, float* scratch, const float* inp, const float* w, int64_t N,
                      int64_t ICl, int64_t OCl, const Linear2d& L) {
  const int gi = L.gather->size();
  float* part = scratch;            // [N, OCl]
  float* pack = scratch + N * OCl;  // [N, max(ICl, OCl)]
  gather_features(x_full, pack, inp, N, ICl, {}, *L.gather,
                  label_of(L.site, "gather_features", "forward", N, ICl / gi));
  linear_forward(part, x_full, w, N, ICl, OCl);
  scatter_features(out, pack, part, N, OCl, L.out_blocks, *L.scatter,
                   label_of(L.site, "scatter_features", "forward", N, OCl));
}

void linear2d_backward(float* dinp, float* dw, float* scratch, const float* dout, const float* x_full,
                       const float* w, int64_t N, int64_t ICl, int64_t OCl, const Linear2d& L) {
  const int gs = L.scatter->size();
  float* dfull = scratch;            // [N, OCl]
  float* dpart = scratch + N * OCl;  // [N, ICl]
  float* pack = dpart + N * ICl;     // [N, max(ICl, OCl)]
  gather_features(dfull, pack, dout, N, OCl, L.out_blocks, *L.scatter,
                  label_of(L.site, "scatter_features", "backward", N, OCl / gs));
  if (dw != nullptr) linear_backward(nullptr, dw, dfull, x_full, nullptr, N, ICl, OCl);
  if (dinp == nullptr) return;
  linear_backward(dpart, nullptr, dfull, nullptr, w, N, ICl, OCl);
  scatter_features(dinp, pack, dpart, N, ICl, {}, *L.gather,
                   label_of(L.site, "gather_features", "backward", N, ICl));
}

void rmsnorm2d_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t dl,
                       int64_t d, float eps, Group& tp, std::string_view site) {
  DeviceScratch<double> ss(N);  // per row, on the device
  split_rmsnorm_sum_squares(ss.data(), inp, N, dl);
  tp.all_reduce(ss.data(), N, tp::comm_label(site, "norm sums of squares", "forward", {N}));
  split_rmsnorm_scale(out, rstd, inp, w, ss.data(), N, dl, d, eps);
}

void rmsnorm2d_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                        const float* rstd, int64_t N, int64_t dl, int64_t d, Group& tp,
                        std::string_view site) {
  // dx = r · (w ⊙ dy) − r³ / d · x · Σ over all d features of (w ⊙ dy ⊙ x)
  DeviceScratch<double> dot(N);
  split_rmsnorm_dot(dot.data(), dout, inp, w, N, dl);
  tp.all_reduce(dot.data(), N, tp::comm_label(site, "norm sums", "backward", {N}));
  split_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, dot.data(), N, dl, d);
}

}  // namespace mt::tp2d

#include "parallel/tp2d_linear.h"

#include <cmath>
#include <cstring>
#include <string>

#include "core/error.h"
#include "ops/gemm.h"
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
// slab j holds the j-th g-th of every block. f(slab_ptr, wide_offset, n)
// visits each run of n features once.
template <class F>
void for_each_piece(int64_t N, int64_t k, const Blocks& blocks, int g, F&& f) {
  const int64_t kl = k / g;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    int64_t off = 0, loff = 0;  // the block's first feature in [N, k] and in a slab
    for (int64_t s : blocks) {
      const int64_t part = s / g;
      for (int j = 0; j < g; ++j)
        f((j * N + n) * kl + loff, n * k + off + j * part, part);
      off += s;
      loff += part;
    }
  }
}

void pack(float* slabs, const float* wide, int64_t N, int64_t k, const Blocks& blocks, int g) {
  for_each_piece(N, k, blocks, g, [&](int64_t a, int64_t w, int64_t n) {
    std::memcpy(slabs + a, wide + w, static_cast<size_t>(n) * sizeof(float));
  });
}

void unpack(float* wide, const float* slabs, int64_t N, int64_t k, const Blocks& blocks, int g) {
  for_each_piece(N, k, blocks, g, [&](int64_t a, int64_t w, int64_t n) {
    std::memcpy(wide + w, slabs + a, static_cast<size_t>(n) * sizeof(float));
  });
}

void copy(float* dst, const float* src, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
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
  std::vector<double> ss(static_cast<size_t>(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * dl;
    for (int64_t c = 0; c < dl; ++c)
      ss[static_cast<size_t>(n)] += static_cast<double>(x[c]) * x[c];
  }
  tp.all_reduce(ss.data(), N, tp::comm_label(site, "norm sums of squares", "forward", {N}));
  for (int64_t n = 0; n < N; ++n) {
    const float r =
        static_cast<float>(1.0 / std::sqrt(ss[static_cast<size_t>(n)] / static_cast<double>(d) + eps));
    rstd[n] = r;
    for (int64_t c = 0; c < dl; ++c)
      out[n * dl + c] = (inp[n * dl + c] * r) * w[c];
  }
}

void rmsnorm2d_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                        const float* rstd, int64_t N, int64_t dl, int64_t d, Group& tp,
                        std::string_view site) {
  // dx = r · (w ⊙ dy) − r³ / d · x · Σ over all d features of (w ⊙ dy ⊙ x)
  std::vector<double> dot(static_cast<size_t>(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < dl; ++c)
      dot[static_cast<size_t>(n)] += static_cast<double>(w[c] * dout[n * dl + c]) * inp[n * dl + c];
  }
  tp.all_reduce(dot.data(), N, tp::comm_label(site, "norm sums", "backward", {N}));
  for (int64_t n = 0; n < N; ++n) {
    const float r = rstd[n];
    const float k = static_cast<float>(static_cast<double>(r) * r * r * dot[static_cast<size_t>(n)] /
                                       static_cast<double>(d));
    for (int64_t c = 0; c < dl; ++c)
      dinp[n * dl + c] = r * (w[c] * dout[n * dl + c]) - k * inp[n * dl + c];
  }
  if (dw == nullptr) return;
  for (int64_t c = 0; c < dl; ++c) {
    double s = 0.0;
    for (int64_t n = 0; n < N; ++n)
      s += static_cast<double>(dout[n * dl + c]) * (inp[n * dl + c] * rstd[n]);
    dw[c] += static_cast<float>(s);
  }
}

}  // namespace mt::tp2d

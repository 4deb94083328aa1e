#include "parallel/canonical_tp_grid.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/exact_sum.h"
#include "ops/gemm.h"
#include "ops/primitives.h"
#include "ops/split_rmsnorm.h"
#include "parallel/tp2d_linear.h"
#include "parallel/tp_comm.h"

namespace mt::tp {

namespace {

int64_t width_of(int64_t width, int64_t pieces, const Pieces2d& p) {
  MT_CHECK(pieces >= 1 && width % pieces == 0, "a split width (", width, ") is not ", pieces,
           " pieces at site ", std::string(p.site));
  return width / pieces;
}

std::vector<int64_t> blocks_of(const Pieces2d& p, int64_t OC) {
  return p.blocks.empty() ? std::vector<int64_t>{OC} : p.blocks;
}

// The scratch's regions for a site of local widths IC, OC (pieces2d_scratch_floats).
struct Regions {
  float *pack, *part, *dfull, *leaves;
  Regions(const Pieces2d& p, int64_t N, int64_t IC, int64_t OC) {
    MT_CHECK(p.scratch != nullptr, "the canonical 2-D pieces' scratch is not bound at site ",
             std::string(p.site));
    const int64_t n = N * std::max(IC, OC);
    pack = p.scratch;
    part = pack + n;
    dfull = part + n;
    leaves = dfull + n;
  }
};

std::string label(const Pieces2d& p, const char* pair, const char* dir, int64_t rows, int64_t cols) {
  return comm_label(p.site, pair, dir, {rows, cols});
}

}  // namespace

int64_t pieces2d_scratch_floats(int64_t N, int64_t widest, int64_t most_pieces) {
  return (std::max<int64_t>(most_pieces, 1) + 3) * N * widest;
}

void pieces2d_forward(float* out, float* saved, const float* inp, const float* w, int64_t N, int64_t IC,
                      int64_t OC, const Pieces2d& p, const float* resid) {
  const Regions s(p, N, IC, OC);
  const float* x = inp;
  if (p.gather != nullptr) {  // a copy of every rank's features: exact
    tp2d::gather_features(saved, s.pack, inp, N, IC, {}, *p.gather,
                          label(p, "gather_features", "forward", N, IC / p.gather->size()));
    x = saved;
  }
  const int64_t pi = width_of(IC, p.in, p);
  float* root = p.scatter != nullptr ? s.part : out;
  for (int64_t i = 0; i < p.in; ++i) {  // one leaf per in piece: every out piece's product over it
    float* leaf = p.in > 1 ? s.leaves + i * N * OC : root;
    int64_t at = 0;
    for (int64_t b : blocks_of(p, OC)) {
      const int64_t po = width_of(b, p.out, p);
      for (int64_t j = 0; j < p.out; ++j) {
        const int64_t r = at + j * po;
        sgemm(Trans::no, Trans::yes, N, po, pi, x + i * pi, IC, w + r * IC + i * pi, IC, leaf + r, OC,
              Out::assign);
      }
      at += b;
    }
  }
  if (p.in > 1) sum_in_tree_order(root, s.leaves, static_cast<int>(p.in), N * OC);
  int64_t out_cols = OC;
  if (p.scatter != nullptr) {
    tp2d::scatter_features_tree(out, s.pack, s.part, N, OC, p.blocks, *p.scatter,
                                label(p, "scatter_features", "forward", N, OC));
    out_cols = OC / p.scatter->size();
  } else if (p.reduce != nullptr && p.reduce->size() > 1) {
    p.reduce->all_reduce(out, N * OC, ElemType::f32, SumOrder::tree,
                         label(p, "reduce_from_tp", "forward", N, OC));
  }
  if (resid != nullptr) add(out, resid, N * out_cols);
}

void pieces2d_backward(float* dinp, float* dw, const float* dout, const float* x, const float* w, int64_t N,
                       int64_t IC, int64_t OC, const Pieces2d& p) {
  const Regions s(p, N, IC, OC);
  const float* d = dout;
  if (p.scatter != nullptr) {  // the output gradient of every rank's features: a copy
    tp2d::gather_features(s.dfull, s.pack, dout, N, OC, p.blocks, *p.scatter,
                          label(p, "scatter_features", "backward", N, OC / p.scatter->size()));
    d = s.dfull;
  }
  const int64_t pi = width_of(IC, p.in, p);
  const std::vector<int64_t> blocks = blocks_of(p, OC);
  if (dw != nullptr) {
    int64_t at = 0;
    for (int64_t b : blocks) {
      const int64_t po = width_of(b, p.out, p);
      for (int64_t j = 0; j < p.out; ++j) {
        const int64_t r = at + j * po;
        for (int64_t i = 0; i < p.in; ++i)
          sgemm(Trans::yes, Trans::no, po, pi, N, d + r, OC, x + i * pi, IC, dw + r * IC + i * pi, IC,
                Out::add);
      }
      at += b;
    }
  }
  if (dinp == nullptr) return;
  float* root = p.gather != nullptr ? s.part : dinp;
  for (int64_t j = 0; j < p.out; ++j) {  // one leaf per out piece; its fused blocks add in block order
    float* leaf = p.out > 1 ? s.leaves + j * N * IC : root;
    for (int64_t i = 0; i < p.in; ++i) {
      int64_t at = 0;
      for (size_t bi = 0; bi < blocks.size(); ++bi) {
        const int64_t po = width_of(blocks[bi], p.out, p), r = at + j * po;
        sgemm(Trans::no, Trans::no, N, pi, po, d + r, OC, w + r * IC + i * pi, IC, leaf + i * pi, IC,
              bi == 0 ? Out::assign : Out::add);
        at += blocks[bi];
      }
    }
  }
  if (p.out > 1) sum_in_tree_order(root, s.leaves, static_cast<int>(p.out), N * IC);
  if (p.gather != nullptr)
    tp2d::scatter_features_tree(dinp, s.pack, s.part, N, IC, {}, *p.gather,
                                label(p, "gather_features", "backward", N, IC));
}

namespace {

// sums[n] = the tree over the rank's d pieces, then over tp, of each piece's
// Σ term(n, c) over its features in order (double): of x² (b null) or of
// w·g·x (a = g, b = x).
void sums_over_d(double* sums, const float* a, const float* b, const float* w, int64_t N, int64_t dl,
                 int64_t pieces, Group* tp, std::string_view site, const char* what, const char* dir) {
  MT_CHECK(pieces >= 1 && dl % pieces == 0, "the norms' ", dl, " features are not ", pieces, " d pieces at ",
           std::string(site));
  const int64_t pw = dl / pieces;
  std::vector<double> parts(static_cast<size_t>(pieces * N));
  for (int64_t k = 0; k < pieces; ++k) {
    for (int64_t n = 0; n < N; ++n) {
      double s = 0.0;
      for (int64_t c = k * pw; c < (k + 1) * pw; ++c) {
        const int64_t at = n * dl + c;
        s += b == nullptr ? static_cast<double>(a[at]) * a[at] : static_cast<double>(w[c] * a[at]) * b[at];
      }
      parts[static_cast<size_t>(k * N + n)] = s;
    }
  }
  sum_in_tree_order(sums, parts.data(), static_cast<int>(pieces), N);
  if (tp != nullptr && tp->size() > 1)
    tp->all_reduce(sums, N, ElemType::f64, SumOrder::tree, comm_label(site, what, dir, {N}));
}

}  // namespace

void pieces2d_norm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t N, int64_t dl,
                           int64_t d, float eps, int64_t pieces, Group* tp, std::string_view site) {
  std::vector<double> ss(static_cast<size_t>(N));
  sums_over_d(ss.data(), inp, nullptr, w, N, dl, pieces, tp, site, "norm sums of squares", "forward");
  split_rmsnorm_scale(out, rstd, inp, w, ss.data(), N, dl, d, eps);
}

void pieces2d_norm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            const float* rstd, int64_t N, int64_t dl, int64_t d, int64_t pieces, Group* tp,
                            std::string_view site) {
  std::vector<double> dot(static_cast<size_t>(N));
  sums_over_d(dot.data(), dout, inp, w, N, dl, pieces, tp, site, "norm sums", "backward");
  split_rmsnorm_backward(dinp, dw, dout, inp, w, rstd, dot.data(), N, dl, d);
}

}  // namespace mt::tp

#include "parallel/tensor_parallel.h"

#include <cstring>

#include "core/error.h"
#include "ops/gemm.h"
#include "parallel/tp_comm.h"

namespace mt::tp {

namespace {

void add_into(float* y, const float* x, int64_t n) {
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i)
    y[i] += x[i];
}

void copy(float* dst, const float* src, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

// dweight += dout[N, OCl]ᵀ · gemm_inp, the rows in `rep` summed over rep.group:
// what the weight already holds is set aside, so that only this call's
// contribution is reduced.
void column_weight_grad(float* dweight, const float* dout, const float* gemm_inp, int64_t N, int64_t IC,
                        int64_t OCl, const ReplicatedRows& rep) {
  if (rep.group == nullptr) {
    linear_backward(nullptr, dweight, dout, gemm_inp, nullptr, N, IC, OCl);
    return;
  }
  float* g = dweight + rep.first * rep.row_size;
  const int64_t n = rep.count * rep.row_size;
  copy(rep.scratch, g, n);
  std::memset(g, 0, static_cast<size_t>(n) * sizeof(float));
  linear_backward(nullptr, dweight, dout, gemm_inp, nullptr, N, IC, OCl);
  rep.group->all_reduce(g, n, comm_label(rep.site, "replica grads", "backward", {rep.count, rep.row_size}));
  add_into(g, rep.scratch, n);
}

}  // namespace

const float* column_parallel_forward(float* out, float* inp_full, const float* inp, const float* weight,
                                     int64_t N, int64_t IC, int64_t OCl, const TpLayer& layer) {
  const float* x = inp;
  if (layer.sp_on()) {
    MT_CHECK(inp_full != nullptr, "column_parallel_forward under SP needs inp_full [N, IC]");
    gather_from_sp_forward(inp_full, inp, N, IC, *layer.group, layer.site);
    x = inp_full;
  } else if (layer.on()) {
    copy_to_tp_forward(inp, N, IC, *layer.group, layer.site);
  }
  linear_forward(out, x, weight, N, IC, OCl);
  return x;
}

void column_parallel_backward(float* dinp, float* dweight, float* scratch, const float* dout,
                              const float* gemm_inp, const float* weight, int64_t N, int64_t IC, int64_t OCl,
                              const TpLayer& layer, const ReplicatedRows& replicated) {
  if (dweight != nullptr) column_weight_grad(dweight, dout, gemm_inp, N, IC, OCl, replicated);
  if (dinp == nullptr) return;
  if (layer.sp_on()) {
    // This rank's contribution to the gradient of every token, then the sum of
    // the contributions for this rank's tokens only.
    MT_CHECK(scratch != nullptr, "column_parallel_backward under SP needs scratch [N, IC]");
    linear_backward(scratch, nullptr, dout, nullptr, weight, N, IC, OCl);
    gather_from_sp_backward(dinp, scratch, N, IC, *layer.group, layer.site);
    return;
  }
  linear_backward(dinp, nullptr, dout, nullptr, weight, N, IC, OCl);
  if (layer.on()) copy_to_tp_backward(dinp, N, IC, *layer.group, layer.site);
}

void row_parallel_forward(float* out, float* scratch, const float* inp, const float* weight, int64_t N,
                          int64_t ICl, int64_t OC, const TpLayer& layer, const float* resid) {
  if (!layer.on()) {
    if (resid == nullptr) {
      linear_forward(out, inp, weight, N, ICl, OC);
    } else {
      copy(out, resid, N * OC);
      linear_forward(out, inp, weight, N, ICl, OC, Out::add);
    }
    return;
  }
  const bool sp = layer.sp_on();
  const int64_t rows = sp ? N / layer.group->size() : N;  // of out
  float* part = out;                                      // this rank's partial sum [N, OC]
  if (sp || resid != nullptr) {
    MT_CHECK(scratch != nullptr, "row_parallel_forward needs scratch [N, OC] under SP or with a residual");
    part = scratch;
  }
  linear_forward(part, inp, weight, N, ICl, OC);
  if (sp) {
    scatter_to_sp_forward(out, part, N, OC, *layer.group, layer.site);
  } else {
    reduce_from_tp_forward(part, N, OC, *layer.group, layer.site);
    if (part != out) copy(out, part, N * OC);
  }
  if (resid != nullptr) add_into(out, resid, rows * OC);
}

void row_parallel_backward(float* dinp, float* dweight, float* scratch, const float* dout, const float* inp,
                           const float* weight, int64_t N, int64_t ICl, int64_t OC, const TpLayer& layer) {
  const float* g = dout;
  if (layer.sp_on()) {
    MT_CHECK(scratch != nullptr, "row_parallel_backward under SP needs scratch [N, OC]");
    scatter_to_sp_backward(scratch, dout, N, OC, *layer.group, layer.site);
    g = scratch;
  } else if (layer.on()) {
    reduce_from_tp_backward(dout, N, OC, *layer.group, layer.site);
  }
  linear_backward(dinp, dweight, g, inp, weight, N, ICl, OC);
}

}  // namespace mt::tp

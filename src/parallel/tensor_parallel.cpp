#include "parallel/tensor_parallel.h"

#include <cstring>

#include "core/device.h"
#include "core/error.h"
#include "core/fault_point.h"
#include "ops/gemm.h"
#include "ops/primitives.h"
#include "parallel/tp_comm.h"
#include "parallel/tp_overlap.h"

namespace mt::tp {

namespace {

void add_into(float* y, const float* x, int64_t n) {
  add(y, x, n);
}

void copy(float* dst, const float* src, int64_t n) {
  copy_bytes(dst, src, n * int64_t{sizeof(float)});
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
  zero_bytes(g, n * int64_t{sizeof(float)});
  linear_backward(nullptr, dweight, dout, gemm_inp, nullptr, N, IC, OCl);
  rep.group->all_reduce(g, n, comm_label(rep.site, "replica grads", "backward", {rep.count, rep.row_size}));
  add_into(g, rep.scratch, n);
}

// column_parallel_backward under tp: the input gradient in token pieces and
// its sum over tp (copy_to_tp / gather_from_sp backward), overlapped or not
// (tp_overlap.h); the weight gradient (whole) computes while the last piece's
// sum is in flight.
void column_backward_tp(float* dinp, float* dweight, float* scratch, const float* dout, const float* gemm_inp,
                        const float* weight, int64_t N, int64_t IC, int64_t OCl, const TpLayer& layer,
                        const ReplicatedRows& replicated) {
  Group& tp = *layer.group;
  const ChunkGemm gemm = [&](int64_t first, int64_t rows, float* dst) {
    linear_backward(dst, nullptr, dout + first * OCl, nullptr, weight, rows, IC, OCl);
  };
  const Meanwhile wgrad = [&] {
    if (dweight != nullptr) column_weight_grad(dweight, dout, gemm_inp, N, IC, OCl, replicated);
  };
  if (dinp == nullptr) {
    wgrad();
  } else if (layer.sp_on()) {
    // This rank's contribution to the gradient of every token (scratch), then
    // the sum of the contributions for this rank's tokens only.
    MT_CHECK(scratch != nullptr, "column_parallel_backward under SP needs scratch [N, IC]");
    matmul_reduce_scatter(
        dinp, scratch, N, IC, kOverlapChunks, tp, layer.overlap, gemm,
        {layer.site, "gather_from_sp", "backward"},
        [&] { gather_from_sp_backward(dinp, scratch, N, IC, tp, layer.site); }, wgrad);
  } else {
    matmul_all_reduce(
        dinp, N, IC, kOverlapChunks, tp, layer.overlap, gemm, {layer.site, "copy_to_tp", "backward"},
        [&] { copy_to_tp_backward(dinp, N, IC, tp, layer.site); }, wgrad);
  }
}

}  // namespace

const float* column_parallel_forward(float* out, float* inp_full, const float* inp, const float* weight,
                                     int64_t N, int64_t IC, int64_t OCl, const TpLayer& layer) {
  if (!layer.sp_on()) {
    if (layer.on()) copy_to_tp_forward(inp, N, IC, *layer.group, layer.site);
    linear_forward(out, inp, weight, N, IC, OCl);
    return inp;
  }
  MT_CHECK(inp_full != nullptr, "column_parallel_forward under SP needs inp_full [N, IC]");
  all_gather_matmul(
      inp_full, inp, N, IC, *layer.group, layer.overlap,
      [&](int64_t first, int64_t rows) {
        linear_forward(out + first * OCl, inp_full + first * IC, weight, rows, IC, OCl);
      },
      {layer.site, "gather_from_sp", "forward"},
      [&] { gather_from_sp_forward(inp_full, inp, N, IC, *layer.group, layer.site); });
  return inp_full;
}

void column_parallel_backward(float* dinp, float* dweight, float* scratch, const float* dout,
                              const float* gemm_inp, const float* weight, int64_t N, int64_t IC, int64_t OCl,
                              const TpLayer& layer, const ReplicatedRows& replicated) {
  if (layer.on()) {
    column_backward_tp(dinp, dweight, scratch, dout, gemm_inp, weight, N, IC, OCl, layer, replicated);
    return;
  }
  if (dweight != nullptr && dinp != nullptr && replicated.group == nullptr) {
    linear_backward(dinp, dweight, dout, gemm_inp, weight, N, IC, OCl);  // one call: a kernel may share dout
    return;
  }
  if (dweight != nullptr) column_weight_grad(dweight, dout, gemm_inp, N, IC, OCl, replicated);
  if (dinp != nullptr) linear_backward(dinp, nullptr, dout, nullptr, weight, N, IC, OCl);
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
  Group& tp = *layer.group;
  const bool sp = layer.sp_on();
  const int64_t rows = sp ? N / tp.size() : N;  // of out
  float* part = out;                            // this rank's partial sum [N, OC]
  if (sp || resid != nullptr) {
    MT_CHECK(scratch != nullptr, "row_parallel_forward needs scratch [N, OC] under SP or with a residual");
    part = scratch;
  }
  const ChunkGemm gemm = [&](int64_t first, int64_t n, float* dst) {
    linear_forward(dst, inp + first * ICl, weight, n, ICl, OC);
  };
  if (sp) {
    matmul_reduce_scatter(out, part, N, OC, kOverlapChunks, tp, layer.overlap, gemm,
                          {layer.site, "scatter_to_sp", "forward"},
                          [&] { scatter_to_sp_forward(out, part, N, OC, tp, layer.site); });
  } else {
    matmul_all_reduce(part, N, OC, kOverlapChunks, tp, layer.overlap, gemm,
                      {layer.site, "reduce_from_tp", "forward"},
                      [&] { reduce_from_tp_forward(part, N, OC, tp, layer.site); });
    if (skipped_reduction(layer.site)) linear_forward(part, inp, weight, N, ICl, OC);  // MESHTRAIN_FAULT
    if (part != out) copy(out, part, N * OC);
  }
  if (resid != nullptr) add_into(out, resid, rows * OC);
}

void row_parallel_backward(float* dinp, float* dweight, float* scratch, const float* dout, const float* inp,
                           const float* weight, int64_t N, int64_t ICl, int64_t OC, const TpLayer& layer) {
  if (!layer.sp_on()) {
    if (layer.on()) reduce_from_tp_backward(dout, N, OC, *layer.group, layer.site);
    linear_backward(dinp, dweight, dout, inp, weight, N, ICl, OC);
    return;
  }
  // The output gradient gathered into scratch [N, OC] (scatter_to_sp backward),
  // the input gradient of each rank's block as it arrives; the weight gradient
  // needs all of it.
  MT_CHECK(scratch != nullptr, "row_parallel_backward under SP needs scratch [N, OC]");
  all_gather_matmul(
      scratch, dout, N, OC, *layer.group, layer.overlap,
      [&](int64_t first, int64_t rows) {
        if (dinp != nullptr)
          linear_backward(dinp + first * ICl, nullptr, scratch + first * OC, nullptr, weight, rows, ICl, OC);
      },
      {layer.site, "scatter_to_sp", "backward"},
      [&] { scatter_to_sp_backward(scratch, dout, N, OC, *layer.group, layer.site); });
  linear_backward(nullptr, dweight, scratch, inp, nullptr, N, ICl, OC);
}

}  // namespace mt::tp

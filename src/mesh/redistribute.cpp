// The communicating half of redistribute: runs plan_redistribute's steps, one
// collective each, packing non-contiguous shards into blocks around it.
#include "mesh/redistribute.h"

#include <cstring>

#include "core/error.h"
#include "core/tensor.h"
#include "mesh/mesh.h"

namespace mt {
namespace {

using Shape = std::vector<int64_t>;

int64_t count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s)
    n *= d;
  return n;
}

Shape with_dim(Shape s, int dim, int64_t n) {
  s[static_cast<size_t>(dim)] = n;
  return s;
}

Shape at_dim(size_t ndim, int dim, int64_t offset) {
  return with_dim(Shape(ndim, 0), dim, offset);
}

// Copies the box `extent` at `src_off` of the row-major array src (shape
// src_shape) to `dst_off` of dst (shape dst_shape). Rows of the last dim are
// contiguous and copied with memcpy.
void copy_box(const float* src, const Shape& src_shape, const Shape& src_off, float* dst,
              const Shape& dst_shape, const Shape& dst_off, const Shape& extent) {
  const size_t nd = extent.size();
  if (count(extent) == 0) return;
  if (nd == 0) {
    *dst = *src;
    return;
  }
  Shape src_stride(nd, 1), dst_stride(nd, 1);
  for (size_t i = nd - 1; i > 0; --i) {
    src_stride[i - 1] = src_stride[i] * src_shape[i];
    dst_stride[i - 1] = dst_stride[i] * dst_shape[i];
  }
  Shape idx(nd, 0);  // over every dim but the last
  const size_t row_bytes = static_cast<size_t>(extent[nd - 1]) * sizeof(float);
  while (true) {
    int64_t s = 0, d = 0;
    for (size_t i = 0; i < nd; ++i) {
      s += (src_off[i] + idx[i]) * src_stride[i];
      d += (dst_off[i] + idx[i]) * dst_stride[i];
    }
    std::memcpy(dst + d, src + s, row_bytes);
    size_t i = nd - 1;
    while (i > 0 && ++idx[i - 1] == extent[i - 1])
      idx[--i] = 0;
    if (i == 0) return;
  }
}

// True when blocks along `dim` are contiguous and exactly k·c rows cover the
// extent, so the collective can work on the caller's buffer unpacked.
bool contiguous_blocks(const Shape& full, int dim, int k, int64_t c) {
  for (int i = 0; i < dim; ++i) {
    if (full[static_cast<size_t>(i)] != 1) return false;
  }
  return full[static_cast<size_t>(dim)] == c * k;
}

void run_step(const float* in, float* out, const Layout& cur, const Layout& next, const RedistStep& step,
              const DeviceMesh& mesh, std::string_view label) {
  const Shape lin = local_shape(cur, mesh.sizes()), lout = local_shape(next, mesh.sizes());
  const size_t nd = lin.size();
  const int k = mesh.size(step.axis);
  if (step.op == RedistOp::copy || k == 1) {  // an axis of one rank changes nothing
    MT_CHECK(lin == lout);
    std::memcpy(out, in, static_cast<size_t>(count(lin)) * sizeof(float));
    return;
  }
  Group group = mesh.group(axis_bit(step.axis));
  const int r = group.rank();
  switch (step.op) {
    case RedistOp::copy:
      break;
    case RedistOp::all_reduce:  // P → R
      std::memcpy(out, in, static_cast<size_t>(count(lin)) * sizeof(float));
      group.all_reduce(out, count(lout), label);
      break;
    case RedistOp::local_slice: {  // R → S(d)
      const int d = step.to.dim();
      const auto [b, e] = shard_range(lin[static_cast<size_t>(d)], k, r);
      std::memset(out, 0, static_cast<size_t>(count(lout)) * sizeof(float));
      copy_box(in, lin, at_dim(nd, d, b), out, lout, Shape(nd, 0), with_dim(lin, d, e - b));
      break;
    }
    case RedistOp::all_gather: {  // S(d) → R
      const int d = step.from.dim();
      const int64_t n = count(lin), full = lout[static_cast<size_t>(d)];
      if (contiguous_blocks(lout, d, k, lin[static_cast<size_t>(d)])) {
        group.all_gather(in, out, n, ElemType::f32, label);
        break;
      }
      Tensor recv({k * n}, MemKind::comm);
      group.all_gather(in, recv.data(), n, ElemType::f32, label);
      for (int i = 0; i < k; ++i) {
        const auto [b, e] = shard_range(full, k, i);
        copy_box(recv.data() + i * n, lin, Shape(nd, 0), out, lout, at_dim(nd, d, b),
                 with_dim(lin, d, e - b));
      }
      break;
    }
    case RedistOp::reduce_scatter: {  // P → S(d)
      const int d = step.to.dim();
      const int64_t n = count(lout), full = lin[static_cast<size_t>(d)];
      if (contiguous_blocks(lin, d, k, lout[static_cast<size_t>(d)])) {
        group.reduce_scatter(in, out, n, ElemType::f32, ReduceOp::sum, label);
        break;
      }
      Tensor send({k * n}, MemKind::comm);  // zeros: padding rows sum to zero
      for (int j = 0; j < k; ++j) {
        const auto [b, e] = shard_range(full, k, j);
        copy_box(in, lin, at_dim(nd, d, b), send.data() + j * n, lout, Shape(nd, 0),
                 with_dim(lout, d, e - b));
      }
      group.reduce_scatter(send.data(), out, n, ElemType::f32, ReduceOp::sum, label);
      break;
    }
    case RedistOp::all_to_all: {  // S(d) → S(e): block j keeps our d rows, takes e shard j
      const int d = step.from.dim(), e_dim = step.to.dim();
      const Shape block = with_dim(lin, e_dim, lout[static_cast<size_t>(e_dim)]);
      const int64_t n = count(block);
      Tensor send({k * n}, MemKind::comm), recv({k * n}, MemKind::comm);
      for (int j = 0; j < k; ++j) {
        const auto [b, e] = shard_range(lin[static_cast<size_t>(e_dim)], k, j);
        copy_box(in, lin, at_dim(nd, e_dim, b), send.data() + j * n, block, Shape(nd, 0),
                 with_dim(block, e_dim, e - b));
      }
      group.all_to_all(send.data(), recv.data(), n, ElemType::f32, label);
      std::memset(out, 0, static_cast<size_t>(count(lout)) * sizeof(float));
      for (int i = 0; i < k; ++i) {
        const auto [b, e] = shard_range(lout[static_cast<size_t>(d)], k, i);
        copy_box(recv.data() + i * n, block, Shape(nd, 0), out, lout, at_dim(nd, d, b),
                 with_dim(block, d, e - b));
      }
      break;
    }
  }
}

}  // namespace

void redistribute(const float* in, float* out, const Layout& from, const Layout& to, const DeviceMesh& mesh,
                  std::string_view label) {
  const std::vector<RedistStep> steps = plan_redistribute(from, to, mesh.sizes());
  if (steps.empty()) {
    std::memcpy(out, in, static_cast<size_t>(local_numel(from, mesh.sizes())) * sizeof(float));
    return;
  }
  // Intermediate layouts live in comm buffers; the last step writes `out`.
  Tensor hold[2];
  Layout cur = from;
  const float* src = in;
  for (size_t s = 0; s < steps.size(); ++s) {
    const Layout next = cur.with(steps[s].axis, steps[s].to);
    float* dst = out;
    if (s + 1 < steps.size()) {
      hold[s % 2] = Tensor({local_numel(next, mesh.sizes())}, MemKind::comm);
      dst = hold[s % 2].data();
    }
    run_step(src, dst, cur, next, steps[s], mesh, label);
    src = dst;
    cur = next;
  }
}

}  // namespace mt

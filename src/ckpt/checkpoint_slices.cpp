#include "ckpt/checkpoint_slices.h"

#include <algorithm>
#include <cstdio>

#include "core/device.h"
#include "core/error.h"
#include "mesh/layout.h"

namespace mt {

namespace {
// f(local offset, box offset, run) for each row of the box along its last dim.
template <class F>
void for_each_box_row(const LocalSlice& s, F&& f) {
  const size_t nd = s.size.size();
  if (s.numel() == 0) return;
  if (nd == 0) {
    f(0, 0, 1);
    return;
  }
  const int64_t run = s.size[nd - 1];
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < nd; ++d)
    rows *= s.size[d];
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rest = r, local = 0, stride = s.local_shape[nd - 1];
    for (size_t d = nd - 1; d-- > 0;) {  // the real elements are a prefix of each padded dim
      local += (rest % s.size[d]) * stride;
      rest /= s.size[d];
      stride *= s.local_shape[d];
    }
    f(local, r * run, run);
  }
}
}  // namespace

std::vector<LocalSlice> local_slices(Llama& chunk, const MeshSizes& sizes, const MeshCoords& coords) {
  ParamStore& store = chunk.store();
  std::vector<LocalSlice> out;
  for (const ParamSpec& spec : chunk.param_table().specs) {
    LocalSlice s = spec_slice(spec, sizes, coords);
    int64_t n = 0;
    s.local_offset = store.local_grad_of(spec.name, &n) - store.local_grads();
    MT_CHECK(n == local_numel(spec.state_layout, sizes), "checkpoint: the store holds ", n, " elements of ",
             spec.name, " but its state layout ", spec.state_layout.to_string(), " says ",
             local_numel(spec.state_layout, sizes));
    out.push_back(std::move(s));
  }
  return out;
}

void slice_to_box(const LocalSlice& slice, const float* local_base, float* box) {
  const float* local = local_base + slice.local_offset;
  for_each_box_row(slice, [&](int64_t li, int64_t bi, int64_t n) {
    copy_to_host(box + bi, local + li, n * int64_t{sizeof(float)}, "checkpoint");
  });
}

void box_to_slice(const LocalSlice& slice, const float* box, float* local_base) {
  float* local = local_base + slice.local_offset;
  for_each_box_row(slice, [&](int64_t li, int64_t bi, int64_t n) {
    copy_from_host(local + li, box + bi, n * int64_t{sizeof(float)}, "checkpoint");
  });
}

MeshSizes run_sizes(const RunMesh& mesh) {
  return MeshSizes{.dp = mesh.dp, .pp = mesh.pp, .cp = mesh.cp, .tp = mesh.tp};
}

MeshCoords run_coords(const RunMesh& mesh) {
  MeshCoords c{};
  c[static_cast<size_t>(axis_index(Axis::dp))] = mesh.dp_rank;
  c[static_cast<size_t>(axis_index(Axis::pp))] = mesh.pp_rank;
  c[static_cast<size_t>(axis_index(Axis::cp))] = mesh.cp_rank;
  c[static_cast<size_t>(axis_index(Axis::tp))] = mesh.tp_rank;
  return c;
}

std::string slice_file_name(int rank) {
  char name[40];
  std::snprintf(name, sizeof(name), "rank-%05d.safetensors", rank);
  return name;
}

}  // namespace mt

// Embedding backward without atomics: a stable radix sort of (id, token)
// groups each id's tokens in token order; the first position of each group
// then adds that group's rows to dtable in that order, which is also the
// CPU's order, so the result matches ops/embedding.cpp bit for bit.
#include <cub/device/device_radix_sort.cuh>

#include "cuda/check.h"
#include "cuda/launch.cuh"
#include "cuda/ops.h"
#include "cuda/scratch.cuh"

namespace mt::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void iota_kernel(int32_t* x, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = static_cast<int32_t>(i);
}

// Block (x: column chunk, y: sorted position i). Only the first position of a
// run of equal ids works: it walks the run, adding rows in token order.
__global__ void embedding_backward_kernel(float* dtable, const float* dout, const int32_t* sorted_ids,
                                          const int32_t* tokens, int64_t start, int64_t N, int64_t C) {
  const int64_t i = start + blockIdx.y;
  const int64_t c = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (c >= C) return;
  const int32_t id = sorted_ids[i];
  if (i > 0 && sorted_ids[i - 1] == id) return;
  float acc = dtable[int64_t{id} * C + c];
  for (int64_t k = i; k < N && sorted_ids[k] == id; ++k)
    acc += dout[int64_t{tokens[k]} * C + c];
  dtable[int64_t{id} * C + c] = acc;
}

}  // namespace

void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C) {
  if (N == 0 || C == 0) return;
  MT_CHECK(N < (1LL << 31), "embedding_backward: ", N, " tokens exceed the sort's 32-bit count");
  detail::Scratch<int32_t> order(N), sorted_ids(N), tokens(N);
  iota_kernel<<<detail::blocks_for(N, 256), 256>>>(order.get(), N);
  MT_CUDA_CHECK_LAUNCH();
  size_t temp_bytes = 0;
  const int n = static_cast<int>(N);
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, ids, sorted_ids.get(), order.get(),
                                                tokens.get(), n));
  detail::Scratch<char> temp(static_cast<int64_t>(temp_bytes));
  MT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp.get(), temp_bytes, ids, sorted_ids.get(), order.get(),
                                                tokens.get(), n));
  // grid.y is limited to 65535: cover longer token lists in slices.
  for (int64_t start = 0; start < N; start += 65535) {
    const int64_t rows = N - start < 65535 ? N - start : 65535;
    const dim3 grid(static_cast<unsigned>((C + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
    embedding_backward_kernel<<<grid, kThreads>>>(dtable, dout, sorted_ids.get(), tokens.get(), start, N, C);
    MT_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace mt::cuda

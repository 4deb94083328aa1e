#include "parallel/tp_overlap.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/device.h"
#include "core/error.h"
#include "parallel/tp_comm.h"

namespace mt::tp {

namespace {

// The tag of the collective matmul's blocks on the tp group (the only
// point-to-point traffic there).
constexpr int kGatherTag = 7101;

// Chunk count actually used: at least one row per chunk.
int clamp_chunks(int chunks, int64_t rows) {
  MT_CHECK(chunks >= 1, "overlap chunks must be at least 1");
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(chunks, rows)));
}

// Lets started collectives move (Open MPI progresses only inside its calls).
void progress(std::vector<Work>& works) {
  for (Work& w : works)
    if (w.valid()) w.test();
}

void finish(std::vector<Work>& works) {
  for (Work& w : works)
    w.wait();
}

}  // namespace

RowRange chunk_rows(int64_t n, int k, int c) {
  const int64_t q = n / k, r = n % k;
  const int64_t first = c * q + std::min<int64_t>(c, r);
  return {first, q + (c < r ? 1 : 0)};
}

void matmul_all_reduce(float* part, int64_t N, int64_t C, int chunks, Group& tp, Overlap mode,
                       const ChunkGemm& gemm, const CommSite& where, const Whole& whole,
                       const Meanwhile& meanwhile) {
  const int k = clamp_chunks(chunks, N);
  std::vector<Work> works;
  works.reserve(static_cast<size_t>(k));
  for (int c = 0; c < k; ++c) {
    const RowRange rr = chunk_rows(N, k, c);
    float* rows = part + rr.first * C;
    gemm(rr.first, rr.count, rows);
    if (mode == Overlap::off) continue;
    progress(works);
    works.push_back(tp.all_reduce_async(rows, rr.count * C, ElemType::f32, SumOrder::ranks,
                                        comm_label(where.site, where.pair, where.direction, {rr.count, C})));
  }
  if (meanwhile) meanwhile();
  if (mode == Overlap::off) whole();
  finish(works);
}

void matmul_reduce_scatter(float* out, float* scratch, int64_t N, int64_t C, int chunks, Group& tp,
                           Overlap mode, const ChunkGemm& gemm, const CommSite& where, const Whole& whole,
                           const Meanwhile& meanwhile) {
  const int P = tp.size();
  const int64_t Nl = sp_local_tokens(N, tp);
  const int k = clamp_chunks(chunks, Nl);
  std::vector<Work> works;
  works.reserve(static_cast<size_t>(k));
  for (int c = 0; c < k; ++c) {
    const RowRange rr = chunk_rows(Nl, k, c);
    if (mode == Overlap::off) {  // the same GEMMs, their rows in token order
      for (int j = 0; j < P; ++j)
        gemm(j * Nl + rr.first, rr.count, scratch + (j * Nl + rr.first) * C);
      continue;
    }
    float* block = scratch + P * rr.first * C;  // [P, rr.count, C]: rank j's rows of the chunk at j
    for (int j = 0; j < P; ++j)
      gemm(j * Nl + rr.first, rr.count, block + j * rr.count * C);
    progress(works);
    works.push_back(
        tp.reduce_scatter_async(block, out + rr.first * C, rr.count * C, ElemType::f32, SumOrder::ranks,
                                comm_label(where.site, where.pair, where.direction, {P * rr.count, C})));
  }
  if (meanwhile) meanwhile();
  if (mode == Overlap::off) whole();
  finish(works);
}

void all_gather_matmul(float* full, const float* local, int64_t N, int64_t C, Group& tp, Overlap mode,
                       const RowsReady& ready, const CommSite& where, const Whole& whole) {
  const int P = tp.size(), me = tp.rank();
  const int64_t Nl = sp_local_tokens(N, tp);
  if (mode == Overlap::off) {
    whole();
    for (int s = 0; s < P; ++s)
      ready((me + s) % P * Nl, Nl);
    return;
  }
  float* own = full + me * Nl * C;
  if (own != local) copy_bytes(own, local, Nl * C * int64_t{sizeof(float)});
  const std::string label = comm_label(where.site, where.pair, where.direction, {Nl, C});
  std::vector<Work> recvs(static_cast<size_t>(P)), sends;
  for (int j = 0; j < P; ++j) {
    if (j == me) continue;
    recvs[static_cast<size_t>(j)] =
        tp.recv_async(full + j * Nl * C, Nl * C, ElemType::f32, j, kGatherTag, label);
    sends.push_back(tp.send_async(own, Nl * C, ElemType::f32, j, kGatherTag, label));
  }
  ready(me * Nl, Nl);
  // The others' blocks in the order they were sent to this rank's neighbours:
  // rank me+1 first, so that on a ring of ranks no two wait on the same peer.
  for (int s = 1; s < P; ++s) {
    const int j = (me + s) % P;
    progress(sends);
    recvs[static_cast<size_t>(j)].wait();
    ready(j * Nl, Nl);
  }
  finish(sends);
}

}  // namespace mt::tp

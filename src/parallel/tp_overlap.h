// Tensor-parallel GEMMs beside their collectives, in token pieces, with the
// collectives hidden behind compute under Overlap::on (parallel.tp_overlap;
// docs/PARALLELISM.md "Overlapping TP communication"). tensor_parallel.cpp
// runs every TP GEMM next to a collective through these, in both modes:
//
//   Overlap::on   each piece's collective starts as soon as the piece is
//                 computed (or, gathering, a piece multiplies once it is here);
//   Overlap::off  the same GEMM calls on the same pieces, then (gathering:
//                 first) one blocking collective of the whole tensor, `whole`,
//                 the tp_comm.h pair with its usual ledger label.
//
// So the two modes are bitwise equal by construction: the GEMMs are the same
// calls (BLAS's small-matrix kernels do not give a row the same bits when it
// is computed with a different number of other rows, so "the same rows of a
// bigger GEMM" would not do), and every sum is the rank-order sum of
// SumOrder::ranks (comm/group.h), which gives an element the same bits whether
// it is reduced in a chunk or whole. The weight-gradient GEMMs, whose
// contraction runs over tokens, are never split.
//
//   matmul_all_reduce      Partial → Replicate (reduce_from_tp forward,
//                          copy_to_tp backward): chunk c's all-reduce in flight
//                          while chunk c + 1 multiplies.
//   matmul_reduce_scatter  Partial → Shard(0) (scatter_to_sp forward,
//                          gather_from_sp backward): chunk c holds rows
//                          [c0, c1) of every rank's block, so each chunk is one
//                          reduce-scatter.
//   all_gather_matmul      Shard(0) → Replicate feeding a GEMM (gather_from_sp
//                          forward, scatter_to_sp backward), the "collective
//                          matmul": the own block multiplies while the others'
//                          blocks arrive, each block multiplied once it is here.
//
// Ledger labels are those of tp_comm.h, with the chunk's shape.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

#include "comm/group.h"
#include "parallel/tensor_parallel.h"

namespace mt::tp {

// The token chunks of an overlapped GEMM (fewer when there are fewer rows).
constexpr int kOverlapChunks = 4;

// Chunk c of n rows split into k chunks: the first n % k chunks one row longer.
struct RowRange {
  int64_t first = 0, count = 0;
};
RowRange chunk_rows(int64_t n, int k, int c);

// Computes rows [first, first + count) of a [N, C] partial product into
// out[count, C] (contiguous).
using ChunkGemm = std::function<void(int64_t first, int64_t count, float* out)>;
// Multiplies rows [first, first + count) of an input that has just arrived.
using RowsReady = std::function<void(int64_t first, int64_t count)>;
// Work to run while the last chunk's collective is in flight (may be empty).
using Meanwhile = std::function<void()>;
// The blocking collective of the whole tensor (Overlap::off).
using Whole = std::function<void()>;

// Names a collective for the ledger: tp_comm.h's "<site>: <pair> <direction>".
struct CommSite {
  std::string_view site, pair, direction;
};

// part[N, C] ← Σ_tp of the rows gemm computes, in `chunks` chunks.
void matmul_all_reduce(float* part, int64_t N, int64_t C, int chunks, Group& tp, Overlap mode,
                       const ChunkGemm& gemm, const CommSite& where, const Whole& whole,
                       const Meanwhile& meanwhile = {});

// out[N/tp, C] = Σ_tp of this rank's rows of the [N, C] partial product gemm
// computes; scratch [N, C] holds the partial product (on: in chunk order,
// chunk by chunk [tp, rows, C]; off: in token order, which `whole` reduces).
// The chunks split each rank's N/tp rows.
void matmul_reduce_scatter(float* out, float* scratch, int64_t N, int64_t C, int chunks, Group& tp,
                           Overlap mode, const ChunkGemm& gemm, const CommSite& where, const Whole& whole,
                           const Meanwhile& meanwhile = {});

// full[N, C] ← the ranks' local[N/tp, C] in rank order, calling ready() on each
// rank's block once it is in full (this rank's first, then ranks me+1, me+2, …).
void all_gather_matmul(float* full, const float* local, int64_t N, int64_t C, Group& tp, Overlap mode,
                       const RowsReady& ready, const CommSite& where, const Whole& whole);

}  // namespace mt::tp

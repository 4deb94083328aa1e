// Expert parallelism's rule: moving a mixture-of-experts layer's tokens to
// their experts and back (docs/PARALLELISM.md "Expert parallelism").
//
// A microbatch of N tokens routed to k experts each makes N·k choices, choice
// c = n·k + s being token n's s-th expert. The plan sorts the choices by
// expert, stably (within an expert in increasing c, so by token), so that each
// expert reads one contiguous block of rows and runs one GEMM chain over it.
//
//   dispatch  forward: xs[row] = x[token of the row's choice]   (tokens → expert blocks)
//             backward: dx[token] = Σ over its rows of dxs[row]  (expert blocks → tokens)
//   combine   forward: yk[c] = ys[row of c], zero for a dropped choice (expert blocks → choices)
//             backward: dys[row] = dyk[c of the row]            (choices → expert blocks)
//
// With one rank holding every expert (ep = 1, built now) both are a local
// permutation; with ep > 1 (not built yet) dispatch and combine become an
// all-to-all of the per-expert counts and an all-to-all-v of the rows over the
// ep group, the plan's counts and offsets being the local experts'.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/group.h"

namespace mt::ep {

struct RoutePlan {
  int64_t choices = 0;          // N·k
  std::vector<int64_t> count;   // [E] rows each expert takes (after capacity)
  std::vector<int64_t> offset;  // [E + 1] first row of each expert's block
  std::vector<int64_t> order;   // [rows] the choice each row holds
  std::vector<int64_t> row_of;  // [choices] its row, −1 when dropped
  std::vector<int64_t> routed;  // [E] choices that picked each expert (before capacity)
  int64_t dropped = 0;          // choices over an expert's capacity
  int64_t rows() const { return offset.empty() ? 0 : offset.back(); }
};

// The capacity of each expert for a group of `tokens` tokens: ceil(factor ·
// tokens · k / E); −1 (unlimited) when factor is 0 (dropless).
int64_t expert_capacity(double factor, int64_t tokens, int64_t k, int64_t E);

class ExpertDispatch {
 public:
  // group: the ep group (null or size 1: every expert here, a local permutation).
  ExpertDispatch(Group* group, int64_t n_experts);

  // The plan of `choices` choices with experts expert_of[c] in [0, E). An
  // expert keeps its first `capacity` choices in the sorted order (the lowest
  // choice indices: earlier tokens, then lower slots) and drops the rest
  // (capacity −1: none dropped).
  void plan(RoutePlan& p, const int32_t* expert_of, int64_t choices, int64_t capacity) const;

  // xs[p.rows(), C] from x[N, C] (k choices per token); its backward adds into
  // dx[N, C] (assigned: dx is zeroed first).
  void dispatch(float* xs, const float* x, const RoutePlan& p, int64_t k, int64_t C) const;
  void dispatch_backward(float* dx, const float* dxs, const RoutePlan& p, int64_t k, int64_t C) const;
  // yk[choices, C] from ys[p.rows(), C]; its backward dys[p.rows(), C] from dyk.
  void combine(float* yk, const float* ys, const RoutePlan& p, int64_t C) const;
  void combine_backward(float* dys, const float* dyk, const RoutePlan& p, int64_t C) const;

  int64_t n_experts() const { return E_; }

 private:
  Group* group_ = nullptr;
  int64_t E_ = 0;
};

}  // namespace mt::ep

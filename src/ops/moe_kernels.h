// The mixture-of-experts layer's row moves and weighted sums (model/llama_moe.cpp,
// parallel/expert_parallel.h ExpertDispatch): the route's index arrays are the
// plan's (order[r]: the choice row r holds; row_of[c]: choice c's row, −1 when
// dropped), mirrored to the run's device. k choices per token, rows of C floats.
#pragma once

#include <cstdint>

namespace mt {

// xs[r] = x[order[r] / k] for r < R.
void moe_dispatch(float* xs, const float* x, const int64_t* order, int64_t R, int64_t k, int64_t C);
// dx[n] = Σ over slots s in order of dxs[row_of[n·k + s]] (dropped choices skipped), n < N.
void moe_dispatch_backward(float* dx, const float* dxs, const int64_t* row_of, int64_t N, int64_t k,
                           int64_t C);
// yk[c] = ys[row_of[c]], or 0 when dropped, c < choices.
void moe_combine(float* yk, const float* ys, const int64_t* row_of, int64_t choices, int64_t C);
// dys[r] = dyk[order[r]] for r < R.
void moe_combine_backward(float* dys, const float* dyk, const int64_t* order, int64_t R, int64_t C);
// y[n] = mid[n] + Σ over slots s in order of w[n·k + s] · yk[n·k + s].
void moe_weighted_sum(float* y, const float* mid, const float* w, const float* yk, int64_t N, int64_t k,
                      int64_t C);
// dyk[c] = w[c] · dy[n], dw[c] = Σ_j dy[n, j] · yk[c, j] (double sum) for the choices c of token n.
void moe_weighted_sum_backward(float* dyk, float* dw, const float* dy, const float* w, const float* yk,
                               int64_t N, int64_t k, int64_t C);

}  // namespace mt

// SwiGLU activation of the Llama MLP: h = silu(gate) · up, silu(g) = g / (1 + e^−g).
// Gate and up come from one GEMM with the two weights stacked, so each row of
// gu holds the gate in columns [0, F) and up in [F, 2F).
#pragma once

#include <cstdint>

namespace mt {

// out[N, F] = silu(gu[:, :F]) · gu[:, F:]
void swiglu_forward(float* out, const float* gu, int64_t N, int64_t F);

// dgu[N, 2F] assigned.
void swiglu_backward(float* dgu, const float* dout, const float* gu, int64_t N, int64_t F);

}  // namespace mt

// RMSNorm as in Hugging Face Llama: y = x / sqrt(mean(x²) + eps) · weight (no bias).
#pragma once

#include <cstdint>

namespace mt {

// out[N, C] = inp · rstd · weight,  rstd[N] = 1 / sqrt(mean_c(inp²) + eps)  (rstd saved for backward)
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N, int64_t C,
                     float eps);

// dinp[N, C] assigned; dweight[C] accumulated.
void rmsnorm_backward(float* dinp, float* dweight, const float* dout, const float* inp, const float* weight,
                      const float* rstd, int64_t N, int64_t C);

}  // namespace mt

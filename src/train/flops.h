// Analytic FLOPs of a training step, and this machine's SGEMM rate (the
// ceiling MFU is measured against).
#pragma once

#include <cstdint>

#include "model/config.h"

namespace mt {

// Parameters that take part in matrix products: everything except the input
// embedding table (a lookup) and the norm weights; the LM head counts even when
// it is tied to the embedding. A mixture-of-experts layer counts its active
// parameters: the router and top_k experts (docs/MODEL.md).
int64_t matmul_params(const ModelConfig& cfg);

// FLOPs of forward + backward per token at sequence length T:
//   6 · matmul_params  +  6 · n_layers · n_heads · head_dim · T
// The second term is causal attention (QKᵀ and PV: 4·T·H·D per token forward,
// halved by the causal mask, ×3 for forward + backward).
double train_flops_per_token(const ModelConfig& cfg, int64_t seq_len);

// GFLOP/s of cblas_sgemm on n×n matrices with the current thread count,
// best of the repetitions run within about `seconds`.
double measure_sgemm_gflops(int64_t n = 1024, double seconds = 0.5);

}  // namespace mt

// Token embedding lookup.
#pragma once

#include <cstdint>

namespace mt {

// out[N, C] = table[ids[n], :]. Ids are validated by the data loader.
void embedding_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t C);

// dtable[ids[n], :] += dout[n, :]   (accumulated, in token order: deterministic)
void embedding_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t C);

}  // namespace mt

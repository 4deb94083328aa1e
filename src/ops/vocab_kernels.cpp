#include "ops/vocab_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "ops/cpu_kernels.h"

namespace mt {
namespace {

void check_ids(const int32_t* ids, int64_t N, int64_t V, int32_t ignore_index, bool allow_ignore) {
  for (int64_t n = 0; n < N; ++n) {
    const int32_t t = ids[n];
    MT_CHECK((allow_ignore && t == ignore_index) || (t >= 0 && t < V), "id ", t, " of token ", n,
             " is outside [0, ", V, ")");
  }
}

}  // namespace

void cpu::vocab_lookup(float* out, const int32_t* ids, const float* table_local, int64_t N, int64_t C,
                       int64_t V, VocabRange vs) {
  check_ids(ids, N, V, -1, false);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = ids[n];
    float* row = out + n * C;
    if (id >= vs.begin && id < vs.end)
      std::memcpy(row, table_local + (id - vs.begin) * C, sizeof(float) * static_cast<size_t>(C));
    else
      std::fill(row, row + C, 0.0f);
  }
}

void cpu::vocab_lookup_backward(float* dtable_local, const float* dout, const int32_t* ids, int64_t N,
                                int64_t C, int64_t V, VocabRange vs) {
  check_ids(ids, N, V, -1, false);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = ids[n];
    if (id < vs.begin || id >= vs.end) continue;
    float* row = dtable_local + (id - vs.begin) * C;
    const float* d = dout + n * C;
    for (int64_t c = 0; c < C; ++c)
      row[c] += d[c];
  }
}

// Columns [end − begin, rows) of a logits row are padding: never read.
void cpu::vocab_ce_max(double* max, const float* logits_local, int64_t N, VocabRange vs) {
  const int64_t Vl = vs.rows, real = vs.end - vs.begin;
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits_local + n * Vl;
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t v = 0; v < real; ++v)
      m = std::max(m, static_cast<double>(x[v]));
    max[n] = m;
  }
}

void cpu::vocab_ce_sums(double* sum, double* target, const float* logits_local, const int32_t* targets,
                        const double* max, int64_t N, int64_t V, int32_t ignore_index, VocabRange vs) {
  check_ids(targets, N, V, ignore_index, true);
  const int64_t Vl = vs.rows, real = vs.end - vs.begin;
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits_local + n * Vl;
    const double m = max[n];
    double s = 0.0;
    for (int64_t v = 0; v < real; ++v)
      s += std::exp(static_cast<double>(x[v]) - m);
    sum[n] = s;
    const int64_t t = targets[n];
    target[n] =
        (t != ignore_index && t >= vs.begin && t < vs.end) ? static_cast<double>(x[t - vs.begin]) : 0.0;
  }
}

void cpu::vocab_ce_finish(float* losses, float* lse, const double* max, const double* sum,
                          const double* target, const int32_t* targets, int64_t N, int32_t ignore_index) {
  for (int64_t n = 0; n < N; ++n) {
    const double l = max[n] + std::log(sum[n]);
    lse[n] = static_cast<float>(l);
    losses[n] = targets[n] == ignore_index ? 0.0f : static_cast<float>(l - target[n]);
  }
}

void cpu::vocab_ce_backward(float* dlogits_local, const float* logits_local, const float* lse,
                            const int32_t* targets, float dloss, int64_t N, int64_t V, int32_t ignore_index,
                            VocabRange vs) {
  check_ids(targets, N, V, ignore_index, true);
  const int64_t Vl = vs.rows, real = vs.end - vs.begin;
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits_local + n * Vl;
    float* d = dlogits_local + n * Vl;  // may alias x: each element is read before it is written
    const int32_t t = targets[n];
    if (t == ignore_index) {
      std::fill(d, d + Vl, 0.0f);
      continue;
    }
    const double l = lse[n];
    for (int64_t v = 0; v < real; ++v)
      d[v] = static_cast<float>(dloss * std::exp(static_cast<double>(x[v]) - l));
    std::fill(d + real, d + Vl, 0.0f);
    if (t >= vs.begin && t < vs.end) d[t - vs.begin] -= dloss;
  }
}

}  // namespace mt

#include "ops/rope.h"

#include <cmath>

#include "core/error.h"
#include "ops/cpu_kernels.h"
#include "ops/rope_scaling.h"

namespace mt {

namespace {
std::vector<double> checked_inv_freq(int64_t head_dim, double theta, int64_t max_pos) {
  MT_REQUIRE(head_dim > 0 && head_dim % 2 == 0, ConfigError, "head_dim (", head_dim,
             ") must be positive and even for rotary embeddings");
  MT_REQUIRE(theta > 0, ConfigError, "rope theta (", theta, ") must be positive");
  return rope_inv_freq(RopeScaling{}, head_dim, theta, max_pos, max_pos);
}
}  // namespace

RopeTable::RopeTable(int64_t max_pos, int64_t head_dim, double theta)
    : RopeTable(max_pos, checked_inv_freq(head_dim, theta, max_pos), 1.0) {}

RopeTable::RopeTable(int64_t max_pos, const std::vector<double>& inv_freq, double attention_factor,
                     int64_t seq_len)
    : max_pos_(max_pos), head_dim_(2 * static_cast<int64_t>(inv_freq.size())), seq_len_(seq_len) {
  MT_REQUIRE(!inv_freq.empty(), ConfigError, "rotary embeddings need at least one frequency");
  MT_REQUIRE(max_pos > 0, ConfigError, "max_pos (", max_pos, ") must be positive");
  const int64_t half = head_dim_ / 2;
  cos_.resize(static_cast<size_t>(max_pos * half));
  sin_.resize(static_cast<size_t>(max_pos * half));
  for (int64_t i = 0; i < half; ++i) {
    const double freq = inv_freq[static_cast<size_t>(i)];
    for (int64_t p = 0; p < max_pos; ++p) {
      const double a = static_cast<double>(p) * freq;
      cos_[static_cast<size_t>(p * half + i)] = static_cast<float>(std::cos(a) * attention_factor);
      sin_[static_cast<size_t>(p * half + i)] = static_cast<float>(std::sin(a) * attention_factor);
    }
  }
}

namespace {

// Rotates every head of every token by +a (sign = 1) or −a (sign = −1).
void rotate(float* x, const int32_t* pos, const RopeTable& table, int64_t N, int64_t n_heads,
            int64_t row_stride, float sign) {
  const int64_t D = table.head_dim();
  const int64_t half = D / 2;
  MT_CHECK(n_heads * D <= row_stride, "n_heads (", n_heads, ") × head_dim (", D, ") exceeds row_stride (",
           row_stride, ")");
  for (int64_t n = 0; n < N; ++n) {
    MT_CHECK(pos[n] >= 0 && pos[n] < table.max_pos(), "position ", pos[n], " of token ", n,
             " is outside the rope table [0, ", table.max_pos(), ")");
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const float* cs = table.cos_row(pos[n]);
    const float* sn = table.sin_row(pos[n]);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* lo = x + n * row_stride + h * D;
      float* hi = lo + half;
      for (int64_t i = 0; i < half; ++i) {
        const float c = cs[i];
        const float s = sign * sn[i];
        const float a = lo[i];
        const float b = hi[i];
        lo[i] = a * c - b * s;
        hi[i] = b * c + a * s;
      }
    }
  }
}

}  // namespace

void cpu::rope_forward(float* x, const int32_t* pos, const RopeTable& table, int64_t N, int64_t n_heads,
                       int64_t row_stride) {
  rotate(x, pos, table, N, n_heads, row_stride, 1.0f);
}

void cpu::rope_backward(float* dx, const int32_t* pos, const RopeTable& table, int64_t N, int64_t n_heads,
                        int64_t row_stride) {
  // The rotation is orthogonal: its transpose is the rotation by −a.
  rotate(dx, pos, table, N, n_heads, row_stride, -1.0f);
}

}  // namespace mt

// Rotary position embedding, Hugging Face "rotate half" convention:
// for pair i < D/2 with frequency f_i = theta^(-2i/D) and angle a = pos · f_i,
//   y[i]       = x[i] cos a − x[i + D/2] sin a
//   y[i + D/2] = x[i + D/2] cos a + x[i] sin a
// Positions are explicit per token, so a shard of a sequence (context
// parallelism) rotates by its global positions.
#pragma once

#include <cstdint>
#include <vector>

namespace mt {

// cos and sin of every (position, pair), computed once in double.
class RopeTable {
 public:
  RopeTable(int64_t max_pos, int64_t head_dim, double theta);
  // Any frequencies (head_dim / 2 of them, ops/rope_scaling.h), cos and sin
  // both multiplied by attention_factor.
  // seq_len records the sequence length the frequencies were chosen for
  // (dynamic scaling), 0 when they do not depend on it.
  RopeTable(int64_t max_pos, const std::vector<double>& inv_freq, double attention_factor,
            int64_t seq_len = 0);
  int64_t head_dim() const { return head_dim_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t max_pos() const { return max_pos_; }
  const float* cos_row(int64_t pos) const { return cos_.data() + pos * (head_dim_ / 2); }
  const float* sin_row(int64_t pos) const { return sin_.data() + pos * (head_dim_ / 2); }

 private:
  int64_t max_pos_;
  int64_t head_dim_;
  int64_t seq_len_ = 0;
  std::vector<float> cos_;  // [max_pos, head_dim / 2]
  std::vector<float> sin_;
};

// In place on x: N tokens, row stride `row_stride` floats, `n_heads` heads of
// head_dim at the start of each row (head h at columns [h·D, (h+1)·D)).
void rope_forward(float* x, const int32_t* pos, const RopeTable& table, int64_t N, int64_t n_heads,
                  int64_t row_stride);

// Backward = rotation by −a, in place on the gradient.
void rope_backward(float* dx, const int32_t* pos, const RopeTable& table, int64_t N, int64_t n_heads,
                   int64_t row_stride);

}  // namespace mt

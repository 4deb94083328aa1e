// A small random model for the generation tests, with logits of order 1 so
// that a wrong position, key or scale shows far above the tolerance.
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/llama.h"

namespace mt::testing {

inline ModelConfig tiny_config(const std::string& rope_scaling = "none", int64_t layers = 2) {
  ModelConfig c;
  c.vocab_size = 64;
  c.d_model = 32;
  c.n_layers = layers;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 48;
  c.max_seq_len = 24;
  c.init_std = 0.3;
  c.rope_scaling = rope_scaling;
  return c;
}

inline std::vector<int32_t> tokens(int64_t n, int32_t salt) {
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i)
    t.push_back(static_cast<int32_t>((i * 37 + salt * 11 + 5) % 64));
  return t;
}

inline double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0;
  for (int64_t i = 0; i < n; ++i)
    m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

}  // namespace mt::testing

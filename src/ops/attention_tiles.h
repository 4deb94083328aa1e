// The pieces the CPU attention's forward (attention.cpp) and backward
// (attention_backward.cpp) share: the tile sizes, each tile's position range
// (which decides whether a tile pair is hidden, partly or fully visible), the
// argument checks, masking and a row maximum. Private to src/ops.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"
#include "ops/attention.h"

namespace mt::attention_tiles {

constexpr int64_t kTileQ = 64;  // queries per tile
constexpr int64_t kTileK = 64;  // keys per tile; also the row stride of the score scratch
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Smallest and largest position in one tile of one sequence.
struct PosRange {
  int32_t lo;
  int32_t hi;
};

// ranges[b · n_tiles + t] for the tiles of `tile` positions of each sequence.
inline std::vector<PosRange> tile_ranges(const int32_t* pos, int64_t B, int64_t T, int64_t tile) {
  const int64_t n_tiles = (T + tile - 1) / tile;
  std::vector<PosRange> ranges(static_cast<size_t>(B * n_tiles));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < n_tiles; ++t) {
      PosRange r{std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
      for (int64_t i = t * tile; i < std::min(T, (t + 1) * tile); ++i) {
        r.lo = std::min(r.lo, pos[b * T + i]);
        r.hi = std::max(r.hi, pos[b * T + i]);
      }
      ranges[static_cast<size_t>(b * n_tiles + t)] = r;
    }
  }
  return ranges;
}

inline void validate(const AttentionDims& d) {
  MT_REQUIRE(d.batch >= 0 && d.q_len >= 0 && d.kv_len >= 0, ConfigError, "attention: batch (", d.batch,
             "), q_len (", d.q_len, ") and kv_len (", d.kv_len, ") must be non-negative");
  MT_REQUIRE(d.n_heads >= 1 && d.n_kv_heads >= 1 && d.head_dim >= 1, ConfigError, "attention: n_heads (",
             d.n_heads, "), n_kv_heads (", d.n_kv_heads, ") and head_dim (", d.head_dim,
             ") must be positive");
  MT_REQUIRE(d.n_heads % d.n_kv_heads == 0, ConfigError, "attention: n_heads (", d.n_heads,
             ") must be divisible by n_kv_heads (", d.n_kv_heads, ")");
  MT_REQUIRE(d.q_stride >= d.n_heads * d.head_dim, ConfigError, "attention: q_stride (", d.q_stride,
             ") must be at least n_heads × head_dim (", d.n_heads * d.head_dim, ")");
  MT_REQUIRE(d.out_stride >= d.n_heads * d.head_dim, ConfigError, "attention: out_stride (", d.out_stride,
             ") must be at least n_heads × head_dim (", d.n_heads * d.head_dim, ")");
  MT_REQUIRE(d.kv_stride >= d.n_kv_heads * d.head_dim, ConfigError, "attention: kv_stride (", d.kv_stride,
             ") must be at least n_kv_heads × head_dim (", d.n_kv_heads * d.head_dim, ")");
}

// Hides the keys of one row of scores that the query cannot see (−inf).
inline void mask_row(float* s, int64_t nk, const int32_t* k_pos, int32_t q_pos) {
#pragma omp simd
  for (int64_t c = 0; c < nk; ++c)
    s[c] = k_pos[c] <= q_pos ? s[c] : kNegInf;
}

// max of s[0, n) (−inf when n = 0), in 16 independent lanes so that it
// vectorises without reassociation flags.
inline float row_max(const float* s, int64_t n) {
  constexpr int64_t kLanes = 16;
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, kNegInf);
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes) {
    for (int64_t u = 0; u < kLanes; ++u)
      lanes[u] = lanes[u] < s[c + u] ? s[c + u] : lanes[u];
  }
  for (; c < n; ++c)
    lanes[0] = lanes[0] < s[c] ? s[c] : lanes[0];
  float mx = kNegInf;
  for (int64_t u = 0; u < kLanes; ++u)
    mx = mx < lanes[u] ? lanes[u] : mx;
  return mx;
}

}  // namespace mt::attention_tiles

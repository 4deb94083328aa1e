#include "parallel/shard.h"

#include <algorithm>
#include <cstring>

namespace mt {

ShardLayout::ShardLayout(const UnitSpec& unit, int P) : P_(P) {
  for (const auto& p : unit.params) {
    Piece piece;
    piece.param = &p;
    piece.in_unit = p.offset - unit.begin;
    piece.shard_rows = (p.rows + P - 1) / P;
    piece.in_shard = shard_numel_;
    shard_numel_ += piece.shard_rows * p.row_size;
    pieces_.push_back(piece);
  }
}

int64_t ShardLayout::row_begin(const Piece& p, int r) const {
  return std::min(p.param->rows, static_cast<int64_t>(r) * p.shard_rows);
}

int64_t ShardLayout::row_end(const Piece& p, int r) const {
  return std::min(p.param->rows, static_cast<int64_t>(r + 1) * p.shard_rows);
}

void ShardLayout::extract(const float* full, int r, float* shard) const {
  for (const auto& p : pieces_) {
    const int64_t K = p.param->row_size;
    const int64_t b = row_begin(p, r), e = row_end(p, r);
    float* dst = shard + p.in_shard;
    if (e > b) std::memcpy(dst, full + p.in_unit + b * K, static_cast<size_t>((e - b) * K) * sizeof(float));
    std::memset(dst + (e - b) * K, 0, static_cast<size_t>((p.shard_rows - (e - b)) * K) * sizeof(float));
  }
}

void ShardLayout::pack(const float* full, float* packed) const {
  for (int r = 0; r < P_; ++r)
    extract(full, r, packed + r * shard_numel_);
}

void ShardLayout::unpack(const float* packed, float* full) const {
  for (int r = 0; r < P_; ++r) {
    const float* shard = packed + r * shard_numel_;
    for (const auto& p : pieces_) {
      const int64_t K = p.param->row_size;
      const int64_t b = row_begin(p, r), e = row_end(p, r);
      if (e > b) {
        std::memcpy(full + p.in_unit + b * K, shard + p.in_shard,
                    static_cast<size_t>((e - b) * K) * sizeof(float));
      }
    }
  }
}

}  // namespace mt

#include "parallel/shard.h"

#include <cstring>

#include "mesh/layout.h"

namespace mt {

UnitShards::UnitShards(const UnitSpec& unit, int P, const std::function<bool(const ParamSlot&)>& keep)
    : P_(P) {
  for (const auto& p : unit.params) {
    if (keep && !keep(p)) continue;
    Piece piece;
    piece.param = &p;
    piece.in_unit = p.offset - unit.begin;
    piece.shard_rows = padded_shard_size(p.rows, P);
    piece.in_shard = shard_numel_;
    shard_numel_ += piece.shard_rows * p.row_size;
    pieces_.push_back(piece);
  }
}

std::pair<int64_t, int64_t> UnitShards::rows_of(const Piece& p, int r) const {
  return shard_range(p.param->rows, P_, r);
}

void UnitShards::extract(const float* full, int r, float* shard) const {
  for (const auto& p : pieces_) {
    const int64_t K = p.param->row_size;
    const auto [b, e] = rows_of(p, r);
    float* dst = shard + p.in_shard;
    if (e > b) std::memcpy(dst, full + p.in_unit + b * K, static_cast<size_t>((e - b) * K) * sizeof(float));
    std::memset(dst + (e - b) * K, 0, static_cast<size_t>((p.shard_rows - (e - b)) * K) * sizeof(float));
  }
}

void UnitShards::pack(const float* full, float* packed) const {
  for (int r = 0; r < P_; ++r)
    extract(full, r, packed + r * shard_numel_);
}

void UnitShards::unpack(const float* packed, float* full) const {
  for (int r = 0; r < P_; ++r) {
    const float* shard = packed + r * shard_numel_;
    for (const auto& p : pieces_) {
      const int64_t K = p.param->row_size;
      const auto [b, e] = rows_of(p, r);
      if (e > b) {
        std::memcpy(full + p.in_unit + b * K, shard + p.in_shard,
                    static_cast<size_t>((e - b) * K) * sizeof(float));
      }
    }
  }
}

}  // namespace mt

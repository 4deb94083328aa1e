#include "parallel/shard.h"

#include <cstring>

#include "core/device.h"
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
    if (e > b) copy_bytes(dst, full + p.in_unit + b * K, (e - b) * K * int64_t{sizeof(float)});
    zero_bytes(dst + (e - b) * K, (p.shard_rows - (e - b)) * K * int64_t{sizeof(float)});
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
        copy_bytes(full + p.in_unit + b * K, shard + p.in_shard, (e - b) * K * int64_t{sizeof(float)});
      }
    }
  }
}

}  // namespace mt

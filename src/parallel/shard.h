// Per-parameter dim-0 sharding of one unit over P ranks (FSDP-style).
//
// Each parameter of rows × row_size is split by rows with the padded rule of
// mesh/layout.h (padded_shard_size, shard_range): every rank holds
// s = ceil(rows / P) rows, rank r the rows [r·s, min(rows, (r+1)·s)), padded
// with zeros to s rows. As a Layout this is Shard(0) over the store's group
// taken as one flattened axis, after tp (zero_layout in mesh/layout.h). A rank's shard of the unit packs its
// pieces of every parameter one after the other: shard_numel = Σ s·row_size. Padding is zero in parameters,
// gradients and optimizer state alike, so it never changes a result.
//
//   full unit  ──pack──▶  [rank 0's shard | rank 1's shard | … ]  (reduce-scatter input)
//   [rank 0's shard | …]  ──unpack──▶  full unit                   (all-gather output)
#pragma once

#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "parallel/store.h"

namespace mt {

class UnitShards {
 public:
  // keep: the parameters this sharding covers (default all); the others are
  // left out of the shard, and pack/unpack/extract never touch them.
  UnitShards(const UnitSpec& unit, int P, const std::function<bool(const ParamSlot&)>& keep = {});

  int64_t shard_numel() const { return shard_numel_; }
  int ranks() const { return P_; }

  // full[unit.numel()] → packed[P · shard_numel] (all ranks' shards, padding zeroed).
  void pack(const float* full, float* packed) const;
  // packed[P · shard_numel] → full[unit.numel()].
  void unpack(const float* packed, float* full) const;
  // Rank r's shard of full into shard[shard_numel].
  void extract(const float* full, int r, float* shard) const;

  struct Piece {
    const ParamSlot* param;
    int64_t in_unit = 0;     // first element within the unit
    int64_t shard_rows = 0;  // s
    int64_t in_shard = 0;    // first element within a shard
  };
  const std::vector<Piece>& pieces() const { return pieces_; }
  // Real rows [begin, end) of rank r for piece p (mesh::shard_range).
  std::pair<int64_t, int64_t> rows_of(const Piece& p, int r) const;

 private:
  int P_;
  int64_t shard_numel_ = 0;
  std::vector<Piece> pieces_;
};

}  // namespace mt

// Where a parameter's piece lies under tensor parallelism, 1-D or on a grid:
// the one entry point that the parameter table (model/params.cpp) cuts by.
// A run's tp group has a shape, tp::Grid: 1 × tp is 1-D Megatron tp
// (tp_plan.h tp_slice, tp_layout), R × C with R > 1 a 2-D grid (tp2d.h; the
// pieces of tp_plan.h tp2d_slice, tp2d_layout). Callers pass the shape and
// never ask which of the two it is.
#pragma once

#include <cstdint>
#include <vector>

#include "mesh/layout.h"
#include "parallel/tp2d.h"
#include "parallel/tp_plan.h"

namespace mt::tp {

// The shape of a tp group: rows × cols ranks, rank t at (t / cols, t % cols).
// {1, tp} (and the default {1, 1}) is 1-D.
using Grid = tp2d::Grid;

// Whether `g` is a grid of more than one row (the 2-D layer math runs).
bool on_grid(const Grid& g);

// Tp rank `rank`'s piece of a parameter with this role and full shape, in a
// tp group of `tp` ranks shaped `g` (head_dim: rows per kv head, for 1-D
// kv-replicated heads). ConfigError with the numbers when a dim does not split.
TpSlice piece(Role role, const std::vector<int64_t>& global, int tp, int rank, const Grid& g,
              int64_t head_dim);

// The layout over tp of that piece (holders: the piece's TpSlice::holders).
Layout piece_layout(Role role, const std::vector<int64_t>& global, int tp, const Grid& g, int holders);

// Where rank `rank` of a grid holds its heads and hidden channels: block
// c·R + r of R·C, (r, c) = (rank / C, rank % C), and the vocabulary rows of
// tp_c rank c. The start-up rules of a grid's sizes (n_heads, n_kv_heads,
// ffn_hidden divisible by R·C) are checked first, ConfigError naming them.
struct GridPlace {
  int64_t block = 0;  // c·R + r
  int64_t col = 0;    // c: the vocabulary shard
};
GridPlace grid_place(const Grid& g, int tp, int rank, int64_t n_heads, int64_t n_kv_heads,
                     int64_t ffn_hidden);

// The start-up rules of a grid with R > 1 and what the rest of the run asks
// for (tp2d.h check; nothing for 1-D tp): ConfigError naming the key.
using GridCompanions = tp2d::Companions;
void check_grid(const Grid& g, const GridCompanions& with);

}  // namespace mt::tp

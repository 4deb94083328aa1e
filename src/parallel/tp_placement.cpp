#include "parallel/tp_placement.h"

#include "core/error.h"

namespace mt::tp {

bool on_grid(const Grid& g) {
  return g.two_d();
}

TpSlice piece(Role role, const std::vector<int64_t>& global, int tp, int rank, const Grid& g,
              int64_t head_dim) {
  return on_grid(g) ? tp2d_slice(role, global, g, rank) : tp_slice(role, global, tp, rank, head_dim);
}

Layout piece_layout(Role role, const std::vector<int64_t>& global, int tp, const Grid& g, int holders) {
  if (on_grid(g)) return tp2d_layout(role, global, g);
  return tp > 1 ? tp_layout(role, global, holders) : Layout(global);
}

GridPlace grid_place(const Grid& g, int tp, int rank, int64_t n_heads, int64_t n_kv_heads,
                     int64_t ffn_hidden) {
  tp2d::check(g, {.n_kv_heads = n_kv_heads, .n_heads = n_heads, .ffn_hidden = ffn_hidden});
  MT_REQUIRE(tp == g.rows * g.cols && rank >= 0 && rank < tp, ConfigError, "tp rank ", rank, " of ", tp,
             " is outside the 2-D grid ", g.rows, " x ", g.cols);
  const int64_t r = rank / g.cols, c = rank % g.cols;
  return {c * g.rows + r, c};
}

void check_grid(const Grid& g, const GridCompanions& with) {
  tp2d::check(g, with);
}

}  // namespace mt::tp

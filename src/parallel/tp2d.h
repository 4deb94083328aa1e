// 2-D tensor parallelism: the tp ranks as an R × C grid (docs/PARALLELISM.md
// "2-D tensor parallelism"). Tp rank t sits at (r, c) = (t / C, t % C); the
// sub-axis tp_c holds the C ranks of one grid row (fixed r: adjacent ranks),
// tp_r the R ranks of one grid column (fixed c: stride C). R = 1 is the 1-D
// Megatron layout of tensor_parallel.h, run by that code unchanged; R > 1 is
// run by the grid entries of linear_plan.h with tp2d_linear.h.
#pragma once

#include <cstdint>
#include <string_view>

namespace mt::tp2d {

// The grid of parallel.tp2d = "R,C".
struct Grid {
  int64_t rows = 1;  // R: the size of tp_r
  int64_t cols = 1;  // C: the size of tp_c
  // Whether the layout is truly 2-D; R = 1 is 1-D tp over C ranks.
  bool two_d() const { return rows > 1; }
};

// Parses parallel.tp2d. "" is 1-D tp: {1, tp}. Otherwise "R,C", two positive
// integers whose product is tp. ConfigError naming the value and the rule:
// "parallel.tp2d ('2x2') must be "R,C" ..." or "... R x C (6) must equal parallel.tp (4)".
Grid parse(std::string_view spec, int64_t tp);

// What the rest of the configuration asks for, as far as 2-D tp cares.
struct Companions {
  bool sp = false;         // parallel.sp
  int64_t cp = 1, pp = 1;  // parallel.cp, parallel.pp
  bool moe = false;        // a mixture-of-experts model
  bool dropout = false;    // model.attention_dropout or model.hidden_dropout > 0
  int64_t n_kv_heads = 1;  // kv heads are split over all of tp, never replicated, in 2-D
  int64_t n_heads = 1, ffn_hidden = 1;
  bool tp_overlap = false;  // parallel.tp_overlap: its chunked GEMMs are 1-D tp's
};

// The start-up rules of a grid with R > 1 (nothing for R = 1, which is 1-D tp
// and takes its rules): ConfigError naming the key that 2-D tp is not built
// with (parallel.sp, parallel.cp, parallel.pp, a mixture of experts, dropout,
// parallel.tp_overlap), then the divisibility of
// n_heads, n_kv_heads and ffn_hidden by tp. The model runs such a grid with
// the layer math of tp2d_linear.h (the grid entries of linear_plan.h).
void check(const Grid& grid, const Companions& with);

}  // namespace mt::tp2d

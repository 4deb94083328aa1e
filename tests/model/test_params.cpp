#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "core/philox.h"
#include "model/params.h"
#include "parallel/shard.h"
#include "parallel/tp_plan.h"

namespace mt {
namespace {

TEST(ParamTable, HuggingFaceNamesShapesAndFusedAdjacency) {
  ModelConfig c;
  c.vocab_size = 100;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  const ParamTable t = make_param_table(c);
  EXPECT_EQ(t.find("model.embed_tokens.weight").shape, (std::vector<int64_t>{100, 16}));
  EXPECT_EQ(t.find("model.layers.1.self_attn.q_proj.weight").shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(t.find("model.layers.1.self_attn.k_proj.weight").shape, (std::vector<int64_t>{8, 16}));
  EXPECT_EQ(t.find("model.layers.1.self_attn.o_proj.weight").shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(t.find("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{16, 24}));
  EXPECT_EQ(t.find("lm_head.weight").shape, (std::vector<int64_t>{100, 16}));
  // q, k, v adjacent (one fused GEMM); gate, up adjacent.
  const auto& q = t.find("model.layers.1.self_attn.q_proj.weight");
  EXPECT_EQ(t.find("model.layers.1.self_attn.k_proj.weight").offset, q.offset + q.numel);
  const auto& g = t.find("model.layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(t.find("model.layers.0.mlp.up_proj.weight").offset, g.offset + g.numel);
  // 2·V·C + L·(2C + C·(C + 2·KV·D) + C·C + 3·C·F) + C
  EXPECT_EQ(t.total, 2 * 100 * 16 + 2 * (2 * 16 + 16 * 32 + 16 * 16 + 3 * 16 * 24) + 16);
  EXPECT_FALSE(t.find("model.norm.weight").weight_decay);
  EXPECT_FALSE(t.find("model.embed_tokens.weight").weight_decay);
  EXPECT_TRUE(t.find("lm_head.weight").weight_decay);
  EXPECT_THROW(t.find("nope"), ConfigError);

  c.tie_embeddings = true;
  const ParamTable tied = make_param_table(c);
  EXPECT_EQ(tied.lm_head, tied.embed);
  EXPECT_EQ(tied.total, t.total - 100 * 16);
}

TEST(ParamInit, PureFunctionOfSeedNameIndex) {
  ModelConfig c;
  c.vocab_size = 50;
  c.d_model = 8;
  c.n_layers = 3;
  c.n_heads = 2;
  c.n_kv_heads = 2;
  c.ffn_hidden = 12;
  const ParamTable t = make_param_table(c);
  std::vector<float> a(static_cast<size_t>(t.total)), b(a.size()), other(a.size());
  init_params(a.data(), t, c, 42);
  init_params(b.data(), t, c, 42);
  init_params(other.data(), t, c, 43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, other);
  const auto& norm = t.find("model.layers.2.input_layernorm.weight");
  for (int64_t i = 0; i < norm.numel; ++i)
    EXPECT_EQ(a[static_cast<size_t>(norm.offset + i)], 1.0f);
  // The documented rule: element i of a weight is init_std · N(seed, name, i),
  // and residual output projections are further scaled by 1/sqrt(2·n_layers).
  const auto& o = t.find("model.layers.1.self_attn.o_proj.weight");
  const auto& up = t.find("model.layers.1.mlp.up_proj.weight");
  for (int64_t i = 0; i < 5; ++i) {
    EXPECT_FLOAT_EQ(a[static_cast<size_t>(o.offset + i)],
                    static_cast<float>(0.02 / std::sqrt(6.0) * philox_normal(philox_key(42, o.name), i)));
    EXPECT_FLOAT_EQ(a[static_cast<size_t>(up.offset + i)],
                    static_cast<float>(0.02 * philox_normal(philox_key(42, up.name), i)));
  }
}

// Under tensor parallelism every rank's table is its shard of the full model:
// initialised alone, each shard equals its slice of the full initialisation;
// the shards of all ranks reassemble the full model; and each element of the
// model is counted in the gradient norm by exactly one rank.
TEST(ParamTable, TensorParallelShardsReassembleTheFullModel) {
  ModelConfig c;
  c.vocab_size = 37;  // padded on 2 and 4 ranks
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;  // split on 2 ranks, replicated on 4
  c.ffn_hidden = 24;
  const ParamTable whole = make_param_table(c);
  std::vector<float> full(static_cast<size_t>(whole.total));
  init_params(full.data(), whole, c, 5);
  for (int P : {2, 4}) {
    std::vector<float> rebuilt(full.size(), -7.0f);
    int64_t counted = 0;
    for (int r = 0; r < P; ++r) {
      const ParamTable t = make_param_table(c, {P, r});
      ASSERT_EQ(t.specs.size(), whole.specs.size());
      std::vector<float> mine(static_cast<size_t>(t.total)), sliced(mine.size());
      MeshCoords at{};
      at[static_cast<size_t>(axis_index(Axis::tp))] = r;
      init_params(mine.data(), t, c, 5);
      for (size_t i = 0; i < t.specs.size(); ++i) {
        const ParamSpec& s = t.specs[i];
        EXPECT_EQ(s.global_shape, whole.specs[i].shape) << s.name;
        // The layout in the table reads this rank's piece (mesh/layout.h's slice reader) and writes it back.
        ASSERT_EQ(local_shape(s.layout, MeshSizes{.tp = P}), s.shape) << s.name;
        copy_to_local(s.layout, MeshSizes{.tp = P}, at, full.data() + whole.specs[i].offset,
                      sliced.data() + s.offset);
        copy_to_full(s.layout, MeshSizes{.tp = P}, at, mine.data() + s.offset,
                     rebuilt.data() + whole.specs[i].offset);
        if (!s.norm_counted) continue;
        // Real (non-padding) elements only.
        counted += s.map == ShardMap::rows ? s.count * s.shape[1] : s.numel;
      }
      EXPECT_EQ(mine, sliced) << "tp " << P << " rank " << r;
      EXPECT_EQ(t.find("model.layers.0.self_attn.k_proj.weight").layout.to_string(),
                P == 2 ? "[8, 16] tp:S(0)" : "[8, 16] tp:S(0)x2");
      const ParamSpec& q = t.find("model.layers.0.self_attn.q_proj.weight");
      EXPECT_EQ(q.shape, (std::vector<int64_t>{16 / P, 16}));
      const ParamSpec& k = t.find("model.layers.1.self_attn.k_proj.weight");
      EXPECT_EQ(k.first, P == 2 ? r * 4 : r / 2 * 4);  // head_dim 4: kv head r, or r/2 replicated
      const ParamSpec& down = t.find("model.layers.1.mlp.down_proj.weight");
      EXPECT_EQ(down.shape, (std::vector<int64_t>{16, 24 / P}));
      EXPECT_EQ(t.find("lm_head.weight").shape[0], (37 + P - 1) / P);
    }
    EXPECT_EQ(rebuilt, full) << "tp " << P;
    EXPECT_EQ(counted, whole.total) << "tp " << P;
  }
  EXPECT_THROW(make_param_table(c, {3, 0}), ConfigError);  // 4 heads over 3 ranks
}

// On a 2-D grid (R > 1) every rank's table holds distinct pieces, cut by
// tp::tp2d_slice: initialised alone, the pieces of all ranks put back by their
// maps give the one-process model, each element exactly once, and every rank
// counts its pieces in the gradient norm (docs/PARALLELISM.md "2-D tensor
// parallelism"). Shapes by hand for 2 x 2: d 16, 4 heads of 4, F 24, V 37.
TEST(ParamTable, GridPiecesTileTheFullModelOnce) {
  ModelConfig c;
  c.vocab_size = 37;  // 19 rows per tp_c rank on C = 2, the last one padding
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 4;  // split over the grid: 2-D tp never replicates a kv head
  c.ffn_hidden = 24;
  for (bool tied : {false, true}) {
    c.tie_embeddings = tied;
    const ParamTable whole = make_param_table(c);
    std::vector<float> full(static_cast<size_t>(whole.total));
    init_params(full.data(), whole, c, 5);
    for (const tp2d::Grid grid : {tp2d::Grid{2, 2}, tp2d::Grid{2, 1}, tp2d::Grid{4, 1}}) {
      const int P = static_cast<int>(grid.rows * grid.cols);
      std::vector<int> writes(full.size(), 0);
      for (int t = 0; t < P; ++t) {
        const ParamTable tab = make_param_table(c, {P, t}, {}, {}, grid);
        ASSERT_EQ(tab.specs.size(), whole.specs.size());
        std::vector<float> mine(static_cast<size_t>(tab.total));
        init_params(mine.data(), tab, c, 5);
        for (size_t i = 0; i < tab.specs.size(); ++i) {
          const ParamSpec& s = tab.specs[i];
          EXPECT_TRUE(s.norm_counted) << s.name;
          tp::TpSlice slice{s.map, s.first, s.count, 0, 1};
          slice.col_first = s.col_first;
          slice.col_count = s.col_count;
          const int64_t cols = s.shape.size() > 1 ? s.shape[1] : 1;
          const int64_t gcols = s.global_shape.size() > 1 ? s.global_shape[1] : 1;
          const int64_t base = whole.specs[i].offset;
          tp::for_each_run(slice, cols, gcols, s.numel, 0, s.numel, [&](int64_t li, int64_t gi, int64_t n) {
            for (int64_t j = 0; j < n; ++j) {
              ++writes[static_cast<size_t>(base + gi + j)];
              ASSERT_EQ(mine[static_cast<size_t>(s.offset + li + j)],
                        full[static_cast<size_t>(base + gi + j)])
                  << s.name << " rank " << t;
            }
          });
        }
        if (grid.rows != 2 || grid.cols != 2) continue;
        const int64_t r = t / 2, col = t % 2;
        const ParamSpec& q = tab.find("model.layers.1.self_attn.q_proj.weight");
        EXPECT_EQ(q.shape, (std::vector<int64_t>{8, 8}));  // heads block c over tp_c, d block r over tp_r
        EXPECT_EQ(q.first, col * 8);
        EXPECT_EQ(q.col_first, r * 8);
        const ParamSpec& o = tab.find("model.layers.0.self_attn.o_proj.weight");
        EXPECT_EQ(o.shape, (std::vector<int64_t>{8, 8}));  // d block r over tp_r, heads block c over tp_c
        EXPECT_EQ(o.first, r * 8);
        EXPECT_EQ(o.col_first, col * 8);
        EXPECT_EQ(tab.find("model.layers.0.mlp.down_proj.weight").shape, (std::vector<int64_t>{8, 12}));
        const ParamSpec& norm = tab.find("model.norm.weight");
        EXPECT_EQ(norm.shape, (std::vector<int64_t>{4}));  // feature block t of R x C
        EXPECT_EQ(norm.first, t * 4);
        const ParamSpec& e = tab.find("model.embed_tokens.weight");
        EXPECT_EQ(e.shape, (std::vector<int64_t>{19, 8}));
        EXPECT_EQ(e.count, col == 0 ? 19 : 18);  // vocab rows of tp_c rank c; the last one padding
      }
      EXPECT_TRUE(std::all_of(writes.begin(), writes.end(), [](int w) { return w == 1; }))
          << grid.rows << " x " << grid.cols << (tied ? " tied" : "");
    }
  }
}

// The layouts in the table say which rows each rank holds, and they agree with
// the code that cuts them: the plan's tp slice, then ZeRO's UnitShards over
// dp × cp (one flattened axis). Checked for every spec, every rank of
// tp 2 × dp 2 × cp 2, ZeRO 3 (parameters, gradients and state all sharded).
TEST(ParamTable, LayoutsAgreeWithTheTpSliceAndZeroShards) {
  ModelConfig c;
  c.vocab_size = 37;
  c.d_model = 16;
  c.n_layers = 1;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  const MeshSizes sizes{.dp = 2, .cp = 2, .tp = 2};
  const AxisSet group = axis_bit(Axis::dp) | axis_bit(Axis::cp);
  for (int t = 0; t < 2; ++t) {
    ParamTable table = make_param_table(c, {2, t});
    EXPECT_EQ(table.find("model.layers.0.mlp.down_proj.weight").layout.to_string(), "[16, 24] tp:S(1)");
    set_state_layouts(table, {.zero = 3, .group = group});
    for (const UnitSpec& unit : table.units) {
      const UnitShards shards(unit, 4);
      for (const UnitShards::Piece& piece : shards.pieces()) {
        const ParamSpec& s = table.find(piece.param->name);
        EXPECT_EQ(s.stored_layout, s.state_layout) << s.name;
        EXPECT_EQ(s.grad_layout, s.state_layout) << s.name;
        const int64_t tp_row0 = s.map == ShardMap::rows ? s.first : 0;
        const int64_t tp_rows = s.map == ShardMap::rows ? s.count : s.shape[0];
        for (int d = 0; d < 2; ++d)
          for (int k = 0; k < 2; ++k) {
            MeshCoords at{};
            at[static_cast<size_t>(axis_index(Axis::tp))] = t;
            at[static_cast<size_t>(axis_index(Axis::dp))] = d;
            at[static_cast<size_t>(axis_index(Axis::cp))] = k;
            auto [b, e] = shards.rows_of(piece, d * 2 + k);
            e = std::min(e, tp_rows);  // the tp piece's padding rows are not real
            b = std::min(b, e);
            EXPECT_EQ(local_range(s.stored_layout, 0, sizes, at), std::make_pair(tp_row0 + b, tp_row0 + e))
                << s.name;
          }
      }
    }
  }
}

}  // namespace
}  // namespace mt

namespace mt {
namespace {

// A parameter's piece on a 2-D tp grid (tp_plan.h tp2d_slice, ShardMap::block)
// initialised alone is its block of the full initialisation: local element
// (i, j) is full element (first + i, col_first + j), padding rows are zero,
// also when only part of the piece is asked for (as a ZeRO shard asks).
TEST(ParamInit, TwoDimensionalPiecesAreBlocksOfTheFullInit) {
  ModelConfig c;
  c.vocab_size = 37;  // padded over tp_c = 2
  c.d_model = 16;
  c.n_layers = 1;
  c.n_heads = 4;
  c.n_kv_heads = 4;
  c.ffn_hidden = 24;
  const ParamTable whole = make_param_table(c);
  std::vector<float> full(static_cast<size_t>(whole.total));
  init_params(full.data(), whole, c, 5);
  const tp2d::Grid grid{2, 2};
  for (const ParamSpec& w : whole.specs) {
    for (int t = 0; t < 4; ++t) {
      const tp::TpSlice sl = tp::tp2d_slice(w.role, w.shape, grid, t);
      ParamSpec s = w;
      s.shape = sl.local_shape(w.shape);
      s.map = sl.map;
      s.first = sl.first;
      s.count = sl.count;
      s.col_first = sl.col_first;
      s.col_count = sl.col_count;
      const int64_t cols = s.shape.size() > 1 ? s.shape[1] : 1, gcols = w.shape.size() > 1 ? w.shape[1] : 1;
      s.numel = s.shape[0] * cols;
      std::vector<float> want(static_cast<size_t>(s.numel), 0.0f);
      for (int64_t i = 0; i < s.count; ++i)
        for (int64_t j = 0; j < cols; ++j)
          want[static_cast<size_t>(i * cols + j)] =
              full[static_cast<size_t>(w.offset + (s.first + i) * gcols + s.col_first + j)];
      std::vector<float> got(want.size(), -1.0f), part(want.size() - 3, -1.0f);
      init_param_slice(s, c, 5, 0, s.numel, got.data());
      EXPECT_EQ(got, want) << w.name << " rank " << t;
      init_param_slice(s, c, 5, 2, s.numel - 3, part.data());
      EXPECT_TRUE(std::equal(part.begin(), part.end(), want.begin() + 2)) << w.name << " rank " << t;
    }
  }
}

}  // namespace
}  // namespace mt

#include "parallel/tp_plan.h"

#include <cstring>
#include <string>
#include <tuple>
#include <utility>

#include "core/error.h"

namespace mt::tp {

const char* role_name(Role r) {
  switch (r) {
    case Role::column:
      return "column";
    case Role::row:
      return "row";
    case Role::vocab:
      return "vocab";
    case Role::replicated:
      return "replicated";
    case Role::kv_replicated:
      return "kv-replicated";
  }
  return "?";
}

const std::vector<PlanRow>& llama_plan() {
  static const std::vector<PlanRow> plan = {
      {"model.embed_tokens.weight", Role::vocab, "R (SP: S(0) tokens, by reduce-scatter)", "embed"},
      {"input_layernorm.weight", Role::replicated, "R (SP: S(0) tokens)", "norms"},
      {"self_attn.q_proj.weight", Role::column, "S(last): this rank's heads", "attn qkv"},
      {"self_attn.k_proj.weight", Role::kv_replicated, "S(last): this rank's kv heads", "attn k|v"},
      {"self_attn.v_proj.weight", Role::kv_replicated, "S(last): this rank's kv heads", "attn k|v"},
      {"self_attn.o_proj.weight", Role::row, "P → R (SP: P → S(0))", "attn o"},
      {"post_attention_layernorm.weight", Role::replicated, "R (SP: S(0) tokens)", "norms"},
      {"mlp.gate_proj.weight", Role::column, "S(last): hidden slice", "mlp gate_up"},
      {"mlp.up_proj.weight", Role::column, "S(last): hidden slice", "mlp gate_up"},
      {"mlp.down_proj.weight", Role::row, "P → R (SP: P → S(0))", "mlp down"},
      // Mixture of experts: neither the router nor an expert is split over tp.
      {"block_sparse_moe.gate.weight", Role::replicated, "R: router logits", "moe router"},
      {"w1.weight", Role::replicated, "R: the expert's rows", "moe experts"},
      {"w3.weight", Role::replicated, "R: the expert's rows", "moe experts"},
      {"w2.weight", Role::replicated, "R: the expert's rows", "moe experts"},
      {"model.norm.weight", Role::replicated, "R (SP: S(0) tokens)", "final norm"},
      {"lm_head.weight", Role::vocab, "S(last): vocab slice of the logits", "head"},
  };
  return plan;
}

const PlanRow& plan_row(std::string_view hf_name) {
  for (const PlanRow& r : llama_plan()) {
    if (hf_name.size() >= r.suffix.size() && hf_name.substr(hf_name.size() - r.suffix.size()) == r.suffix)
      return r;
  }
  MT_THROW(ConfigError, "parameter '", std::string(hf_name), "' has no row in the tensor-parallel plan");
}

std::string layer_site(int64_t layer, std::string_view suffix) {
  return "layer " + std::to_string(layer) + " " + std::string(plan_row(suffix).site);
}

std::vector<int64_t> TpSlice::local_shape(std::vector<int64_t> global) const {
  if (map == ShardMap::rows || map == ShardMap::block) global[0] = extent;
  if (map == ShardMap::cols) global[1] = extent;
  if (map == ShardMap::block) global[1] = col_count;
  return global;
}

namespace {

TpSlice even(ShardMap map, int64_t dim, int tp, int rank, const char* what) {
  MT_REQUIRE(dim % tp == 0, ConfigError, what, " (", dim, ") must be divisible by tp (", tp, ")");
  TpSlice s;
  s.map = map;
  s.count = s.extent = dim / tp;
  s.first = rank * s.count;
  return s;
}

}  // namespace

void check_tp_rank(int tp, int rank) {
  MT_REQUIRE(tp >= 1 && rank >= 0 && rank < tp, ConfigError, "tp rank ", rank, " is outside a tp group of ",
             tp);
}

TpSlice tp_slice(Role role, const std::vector<int64_t>& g, int tp, int rank, int64_t head_dim) {
  check_tp_rank(tp, rank);
  TpSlice s;
  if (tp == 1) return s;
  switch (role) {
    case Role::replicated:
      s.holders = tp;
      return s;
    case Role::column:
      return even(ShardMap::rows, g[0], tp, rank, "output features");
    case Role::row:
      return even(ShardMap::cols, g[1], tp, rank, "input features");
    case Role::vocab: {
      const auto [begin, end] = shard_range(g[0], tp, rank);
      s.map = ShardMap::rows;
      s.first = begin;
      s.count = end - begin;
      s.extent = padded_shard_size(g[0], tp);
      return s;
    }
    case Role::kv_replicated: {
      const int64_t heads = g[0] / head_dim;
      if (heads % tp == 0) return even(ShardMap::rows, g[0], tp, rank, "kv features");
      MT_REQUIRE(tp % heads == 0, ConfigError, "kv heads (", heads, ") and tp (", tp,
                 "): one must divide the other");
      s.map = ShardMap::rows;
      s.holders = static_cast<int>(tp / heads);
      s.first = (rank / s.holders) * head_dim;
      s.count = s.extent = head_dim;
      return s;
    }
  }
  return s;
}

namespace {

// Block `index` of `ways` even blocks of a dim: {first, count}.
std::pair<int64_t, int64_t> even_block(int64_t dim, int64_t ways, int64_t index, const char* axis,
                                       const char* what) {
  MT_REQUIRE(dim % ways == 0, ConfigError, what, " (", dim, ") must be divisible by ", axis, " (", ways,
             ") under parallel.tp2d");
  return {index * (dim / ways), dim / ways};
}

// A block piece: rows [first, first + count) (extent rows, padding included)
// and the columns of `cols`.
TpSlice block_piece(int64_t first, int64_t count, int64_t extent, std::pair<int64_t, int64_t> cols) {
  TpSlice s;
  s.map = ShardMap::block;
  s.first = first;
  s.count = count;
  s.extent = extent;
  s.col_first = cols.first;
  s.col_count = cols.second;
  return s;
}

}  // namespace

TpSlice tp2d_slice(Role role, const std::vector<int64_t>& g, const tp2d::Grid& grid, int rank) {
  const int64_t R = grid.rows, C = grid.cols;
  MT_REQUIRE(grid.two_d() && rank >= 0 && rank < R * C, ConfigError, "tp rank ", rank,
             " is outside a 2-D tp grid of ", R, " x ", C);
  const int64_t r = rank / C, c = rank % C;
  switch (role) {
    case Role::column:
    case Role::kv_replicated: {
      const auto [first, count] = even_block(g[0], C, c, "tp_c", "output features");
      return block_piece(first, count, count, even_block(g[1], R, r, "tp_r", "input features"));
    }
    case Role::row: {
      const auto [first, count] = even_block(g[0], R, r, "tp_r", "output features");
      return block_piece(first, count, count, even_block(g[1], C, c, "tp_c", "input features"));
    }
    case Role::vocab: {
      const auto [begin, end] = shard_range(g[0], static_cast<int>(C), static_cast<int>(c));
      return block_piece(begin, end - begin, padded_shard_size(g[0], static_cast<int>(C)),
                         even_block(g[1], R, r, "tp_r", "embedding features"));
    }
    case Role::replicated:
      break;
  }
  MT_REQUIRE(g.size() == 1, ConfigError, "a replicated ", g.size(),
             "-D parameter (the router or an expert of a mixture of experts) has no split on a 2-D tp grid");
  TpSlice s;
  s.map = ShardMap::rows;
  std::tie(s.first, s.count) = even_block(g[0], R * C, rank, "tp", "norm features");
  s.extent = s.count;
  return s;
}

Layout tp_layout(Role role, std::vector<int64_t> global, int holders) {
  Layout l(std::move(global));
  switch (role) {
    case Role::kv_replicated:
      l.replicas[static_cast<size_t>(axis_index(Axis::tp))] = holders;
      return l.with(Axis::tp, Placement::shard(0));
    case Role::column:
    case Role::vocab:
      return l.with(Axis::tp, Placement::shard(0));
    case Role::row:
      return l.with(Axis::tp, Placement::shard(1));
    case Role::replicated:
      break;
  }
  return l;
}

Layout tp2d_layout(Role role, std::vector<int64_t> global, const tp2d::Grid& grid) {
  if (!grid.two_d()) return tp_layout(role, std::move(global));
  Layout l(std::move(global));
  if (role == Role::replicated) {
    MT_REQUIRE(l.shape.size() == 1, ConfigError, "a replicated ", l.shape.size(),
               "-D parameter has no split on a 2-D tp grid");
    return l.with(Axis::tp, Placement::shard(0));
  }
  const int c_dim = role == Role::row ? 1 : 0;  // the dim over tp_c; the other is over tp_r
  l.grid_rows = static_cast<int>(grid.rows);
  l.grid_dim = 1 - c_dim;
  return l.with(Axis::tp, Placement::shard(c_dim));
}

int kv_replicas(int tp, int64_t n_kv_heads) {
  if (tp <= n_kv_heads) return 1;
  MT_REQUIRE(tp % n_kv_heads == 0, ConfigError, "parallel.tp (", tp,
             ") must be a multiple of model.n_kv_heads (", n_kv_heads, ") when it exceeds it");
  return static_cast<int>(tp / n_kv_heads);
}

// ---- weights given whole ----

namespace {

// Sizes of the blocks along the split dim (one block = the whole dim), checked
// against the dim and against tp.
std::vector<int64_t> checked_blocks(int64_t rows, int64_t cols, const WeightSplit& ws, int tp) {
  const int64_t dim = ws.split == Split::column ? rows : cols;
  std::vector<int64_t> blocks = ws.blocks.empty() ? std::vector<int64_t>{dim} : ws.blocks;
  int64_t total = 0;
  for (size_t b = 0; b < blocks.size(); ++b) {
    MT_REQUIRE(blocks[b] % tp == 0, ConfigError, (ws.split == Split::column ? "output" : "input"),
               " features of block ", b, " (", blocks[b], ") must be divisible by tp (", tp, ")");
    total += blocks[b];
  }
  MT_REQUIRE(total == dim, ConfigError, "fused blocks sum to ", total, " but the split dim has ", dim);
  return blocks;
}

// Calls f(full_offset, shard_offset, n) for every run of rank's shard: each
// block cut by tp_slice, the pieces stacked in block order.
template <class F>
void for_each_block_run(int64_t rows, int64_t cols, const WeightSplit& ws, int rank, int tp, F&& f) {
  const std::vector<int64_t> blocks = checked_blocks(rows, cols, ws, tp);
  const bool column = ws.split == Split::column;
  const int64_t local_cols = column ? cols : cols / tp;
  int64_t start = 0, lstart = 0;  // block start in the full and the local split dim
  for (int64_t b : blocks) {
    const TpSlice s =
        column ? tp_slice(Role::column, {b, cols}, tp, rank) : tp_slice(Role::row, {rows, b}, tp, rank);
    if (column) {
      f((start + s.first) * cols, lstart * cols, s.count * cols);
    } else {
      for (int64_t r = 0; r < rows; ++r)
        f(r * cols + start + s.first, r * local_cols + lstart, s.count);
    }
    start += b;
    lstart += s.count;
  }
}

}  // namespace

Layout weight_layout(int64_t rows, int64_t cols, Split split) {
  return tp_layout(split == Split::column ? Role::column : Role::row, {rows, cols});
}

std::vector<int64_t> shard_shape(int64_t rows, int64_t cols, const WeightSplit& ws, int tp) {
  checked_blocks(rows, cols, ws, tp);
  return ws.split == Split::column ? std::vector<int64_t>{rows / tp, cols}
                                   : std::vector<int64_t>{rows, cols / tp};
}

std::vector<float> shard_weight(const float* full, int64_t rows, int64_t cols, const WeightSplit& ws,
                                int rank, int tp) {
  std::vector<float> shard(static_cast<size_t>(rows * cols / tp));
  for_each_block_run(rows, cols, ws, rank, tp, [&](int64_t fi, int64_t si, int64_t n) {
    std::memcpy(shard.data() + si, full + fi, sizeof(float) * static_cast<size_t>(n));
  });
  return shard;
}

void unshard_weight(float* full, const float* shard, int64_t rows, int64_t cols, const WeightSplit& ws,
                    int rank, int tp) {
  for_each_block_run(rows, cols, ws, rank, tp, [&](int64_t fi, int64_t si, int64_t n) {
    std::memcpy(full + fi, shard + si, sizeof(float) * static_cast<size_t>(n));
  });
}

}  // namespace mt::tp

#include "parallel/tensor_parallel.h"

#include <cstring>

#include "core/error.h"
#include "ops/gemm.h"
#include "parallel/tp_comm.h"

namespace mt::tp {

void column_parallel_forward(float* out, float* inp_full, const float* inp, const float* weight, int64_t N,
                             int64_t IC, int64_t OCl, const TpLayer& layer) {
  const float* x = inp;
  if (layer.sp == SequenceParallel::on) {
    MT_CHECK(inp_full != nullptr, "column_parallel_forward under SP needs inp_full [N, IC]");
    gather_from_sp_forward(inp_full, inp, N, IC, layer.group, layer.site);
    x = inp_full;
  } else {
    copy_to_tp_forward(inp, N, IC, layer.group, layer.site);
  }
  linear_forward(out, x, weight, N, IC, OCl);
}

void column_parallel_backward(float* dinp, float* dweight, const float* dout, const float* gemm_inp,
                              const float* weight, int64_t N, int64_t IC, int64_t OCl, const TpLayer& layer) {
  linear_backward(nullptr, dweight, dout, gemm_inp, weight, N, IC, OCl);
  if (dinp == nullptr) return;
  if (layer.sp == SequenceParallel::on) {
    // This rank's contribution to the gradient of every token, then the sum of
    // the contributions for this rank's tokens only.
    std::vector<float> partial(static_cast<size_t>(N * IC));
    linear_backward(partial.data(), nullptr, dout, gemm_inp, weight, N, IC, OCl);
    gather_from_sp_backward(dinp, partial.data(), N, IC, layer.group, layer.site);
  } else {
    linear_backward(dinp, nullptr, dout, gemm_inp, weight, N, IC, OCl);
    copy_to_tp_backward(dinp, N, IC, layer.group, layer.site);
  }
}

void row_parallel_forward(float* out, const float* inp, const float* weight, int64_t N, int64_t ICl,
                          int64_t OC, const TpLayer& layer) {
  if (layer.sp == SequenceParallel::on) {
    std::vector<float> partial(static_cast<size_t>(N * OC));
    linear_forward(partial.data(), inp, weight, N, ICl, OC);
    scatter_to_sp_forward(out, partial.data(), N, OC, layer.group, layer.site);
  } else {
    linear_forward(out, inp, weight, N, ICl, OC);
    reduce_from_tp_forward(out, N, OC, layer.group, layer.site);
  }
}

void row_parallel_backward(float* dinp, float* dweight, const float* dout, const float* inp,
                           const float* weight, int64_t N, int64_t ICl, int64_t OC, const TpLayer& layer) {
  std::vector<float> gathered;
  const float* g = dout;
  if (layer.sp == SequenceParallel::on) {
    gathered.resize(static_cast<size_t>(N * OC));
    scatter_to_sp_backward(gathered.data(), dout, N, OC, layer.group, layer.site);
    g = gathered.data();
  } else {
    reduce_from_tp_backward(dout, N, OC, layer.group, layer.site);
  }
  linear_backward(dinp, dweight, g, inp, weight, N, ICl, OC);
}

// ---- plan ----

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

// Global index along the split dim of local index i of rank `rank`.
std::vector<int64_t> global_indices(const std::vector<int64_t>& blocks, int rank, int tp) {
  std::vector<int64_t> idx;
  int64_t start = 0;
  for (int64_t b : blocks) {
    const int64_t piece = b / tp;
    for (int64_t i = 0; i < piece; ++i)
      idx.push_back(start + rank * piece + i);
    start += b;
  }
  return idx;
}

}  // namespace

Layout weight_layout(int64_t rows, int64_t cols, Split split) {
  return Layout({rows, cols}).with(Axis::tp, Placement::shard(split == Split::column ? 0 : 1));
}

std::vector<int64_t> shard_shape(int64_t rows, int64_t cols, const WeightSplit& ws, int tp) {
  checked_blocks(rows, cols, ws, tp);
  return ws.split == Split::column ? std::vector<int64_t>{rows / tp, cols}
                                   : std::vector<int64_t>{rows, cols / tp};
}

std::vector<float> shard_weight(const float* full, int64_t rows, int64_t cols, const WeightSplit& ws,
                                int rank, int tp) {
  const std::vector<int64_t> idx = global_indices(checked_blocks(rows, cols, ws, tp), rank, tp);
  const int64_t n = static_cast<int64_t>(idx.size());
  std::vector<float> shard(static_cast<size_t>(rows * cols / tp));
  if (ws.split == Split::column) {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(&shard[static_cast<size_t>(i * cols)], full + idx[static_cast<size_t>(i)] * cols,
                  sizeof(float) * static_cast<size_t>(cols));
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        shard[static_cast<size_t>(r * n + j)] = full[r * cols + idx[static_cast<size_t>(j)]];
  }
  return shard;
}

void unshard_weight(float* full, const float* shard, int64_t rows, int64_t cols, const WeightSplit& ws,
                    int rank, int tp) {
  const std::vector<int64_t> idx = global_indices(checked_blocks(rows, cols, ws, tp), rank, tp);
  const int64_t n = static_cast<int64_t>(idx.size());
  if (ws.split == Split::column) {
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(full + idx[static_cast<size_t>(i)] * cols, shard + i * cols,
                  sizeof(float) * static_cast<size_t>(cols));
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j)
        full[r * cols + idx[static_cast<size_t>(j)]] = shard[r * n + j];
  }
}

const std::vector<PlanRow>& llama_plan() {
  static const std::vector<PlanRow> plan = {
      {"model.embed_tokens.weight", Role::vocab, "R (SP: S(0) tokens, by reduce-scatter)"},
      {"input_layernorm.weight", Role::replicate, "R (SP: S(0) tokens)"},
      {"self_attn.q_proj.weight", Role::column, "S(last): this rank's heads"},
      {"self_attn.k_proj.weight", Role::column, "S(last): this rank's kv heads"},
      {"self_attn.v_proj.weight", Role::column, "S(last): this rank's kv heads"},
      {"self_attn.o_proj.weight", Role::row, "P → R (SP: P → S(0))"},
      {"post_attention_layernorm.weight", Role::replicate, "R (SP: S(0) tokens)"},
      {"mlp.gate_proj.weight", Role::column, "S(last): hidden slice"},
      {"mlp.up_proj.weight", Role::column, "S(last): hidden slice"},
      {"mlp.down_proj.weight", Role::row, "P → R (SP: P → S(0))"},
      {"model.norm.weight", Role::replicate, "R (SP: S(0) tokens)"},
      {"lm_head.weight", Role::vocab, "S(last): vocab slice of the logits"},
  };
  return plan;
}

const char* role_name(Role r) {
  switch (r) {
    case Role::column:
      return "column";
    case Role::row:
      return "row";
    case Role::vocab:
      return "vocab";
    case Role::replicate:
      return "replicate";
  }
  return "?";
}

}  // namespace mt::tp

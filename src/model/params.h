// The model's parameters: one flat fp32 buffer, and a table naming each
// parameter's slice of it with its Hugging Face name and shape.
//
// Order in the buffer: embed_tokens; per layer: input_layernorm, q_proj, k_proj,
// v_proj, o_proj, post_attention_layernorm, gate_proj, up_proj, down_proj (a
// mixture-of-experts layer instead: block_sparse_moe.gate, then per expert e
// in order experts.e.w1, w3, w2 — Mixtral's names); then
// norm and lm_head (absent when embeddings are tied). q, k and v are adjacent,
// so together they are the stacked weight [(H + 2·KV)·D, C] of one fused QKV
// GEMM; gate and up likewise form one [2F, C] weight. A flat buffer makes the
// optimizer, clipping and (later) ZeRO sharding and gradient buckets simple.
//
// Under tensor parallelism (TpRank.size > 1) the table is THIS RANK's: the same
// names and order, with each parameter's local shape and a map onto the full
// tensor, cut by the plan table of parallel/tp_plan.h (q, gate, up column; k, v
// kv-replicated; o, down row; embed, lm_head vocab; norms replicated;
// docs/PARALLELISM.md "Tensor parallelism").
// The fused q|k|v and gate|up blocks then hold this rank's pieces, so the
// same fused GEMMs compute this rank's heads and hidden features. On a 2-D
// grid (R > 1) every piece is cut by its grid split (tp::piece: both dims of a
// matrix, a norm by features over all of tp): docs/PARALLELISM.md "2-D tensor
// parallelism".
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"
#include "parallel/store.h"
#include "parallel/tp_placement.h"
#include "parallel/tp_plan.h"

namespace mt {

enum class ParamInit { normal, residual_out, ones };

// This process's place on the tensor-parallel axis (size 1: the whole model).
struct TpRank {
  int size = 1;
  int rank = 0;
};

// This process's place in its expert-parallel group (size 1: every expert
// here). With size > 1 the table holds experts [rank·E/size, (rank+1)·E/size)
// of each MoE layer, named by their global index; cp_size is the mesh's, for
// the flattened (dp, cp) index of the experts' layouts (mesh/layout.h).
struct EpRank {
  int size = 1;
  int rank = 0;
  int cp_size = 1;
};

// The sizes tensor parallelism splits, on one rank.
struct TpDims {
  int64_t heads = 0;        // query heads here: n_heads / tp
  int64_t kv_heads = 0;     // kv heads here: n_kv_heads / tp, or 1 when replicated
  int64_t kv_head0 = 0;     // global index of the first
  int64_t kv_replicas = 1;  // ranks holding the same kv heads (tp / n_kv_heads when tp > n_kv_heads)
  int64_t ffn = 0;          // ffn_hidden / tp
  int64_t vocab_rows = 0;   // ceil(vocab / tp): rows of the local embedding and LM head
  int64_t vocab_begin = 0;  // global rows [vocab_begin, vocab_end) are real, the rest padding
  int64_t vocab_end = 0;
};
// Throws ConfigError naming the numbers when tp does not divide n_heads or
// ffn_hidden, or when neither of tp and n_kv_heads divides the other.
TpDims tp_dims(const ModelConfig& cfg, TpRank tp);
// The same on a 2-D grid (R > 1; otherwise tp_dims above): rank t = r·C + c
// holds the heads, kv heads and hidden channels of block c·R + r of R·C (never
// a replicated kv head) and the vocabulary rows of tp_c rank c, ceil(V/C)
// (docs/PARALLELISM.md "2-D tensor parallelism").
TpDims tp_dims(const ModelConfig& cfg, TpRank tp, const tp::Grid& grid);

struct ParamSpec {
  std::string name;                   // Hugging Face name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;         // [out, in] for weights, like PyTorch; this rank's under tp
  std::vector<int64_t> global_shape;  // the full tensor's
  int64_t offset = 0;                 // first element in the flat buffer
  int64_t numel = 0;
  ParamInit init = ParamInit::normal;
  bool weight_decay = true;              // false for norms and embeddings
  tp::Role role = tp::Role::replicated;  // its row of the plan (parallel/tp_plan.h)
  // Where the parameter lives on the mesh: `layout` as the model computes with
  // it (its role's tp placement; a kv head replicated over tp is Shard(0) with
  // tp / n_kv_heads ranks per piece), then as the store keeps it between uses
  // (sharded from ZeRO 3), its reduced gradient (from ZeRO 2) and its optimizer
  // state (from ZeRO 1): mesh/layout.h zero_layout over the store's group.
  Layout layout, stored_layout, grad_layout, state_layout;
  ShardMap map = ShardMap::whole;
  int64_t first = 0, count = 0;          // see ShardMap
  int64_t col_first = 0, col_count = 0;  // ShardMap::block only: its columns
  // Whether this rank counts the parameter in the gradient norm: false on all
  // but one of the tp ranks holding the same copy (norms, replicated kv heads).
  bool norm_counted = true;
  // One of this rank's experts under expert parallelism (its gradient is
  // reduced over the expert's replicas only, parallel/data_parallel.h).
  bool expert = false;
  // The last pipeline stage's copy of a tied embedding (see StageRange).
  bool tied_copy = false;
};

// The part of the model one pipeline stage holds: decoder layers
// [first_layer, end_layer) (end −1: n_layers), the embedding on the first
// stage, the final norm and LM head on the last. With tied embeddings and the
// head on a stage without the embedding, that stage holds its own copy of the
// embedding matrix as its head (ParamSpec::tied_copy); the two copies get the
// same initialisation and, their gradients summed between the stages, the same
// updates.
struct StageRange {
  int64_t first_layer = 0, end_layer = -1;
  bool embed = true, head = true;
};

// Offsets into the flat buffer of one layer's parameters. A dense layer has
// gate_up and down (router, experts −1); a mixture-of-experts layer has the
// router [E, C] and its experts from `experts` on, expert e's w1|w3 [2I, C]
// and w2 [C, I] at experts + e·3·I·C (gate_up, down −1).
struct LayerParamOffsets {
  int64_t ln1, qkv, o, ln2, gate_up, down;
  int64_t router = -1, experts = -1;
  bool moe() const { return router >= 0; }
};

struct ParamTable {
  std::vector<ParamSpec> specs;
  StageRange stage;                       // end_layer resolved
  std::vector<LayerParamOffsets> layers;  // the stage's layers, in order
  int64_t embed = -1, norm = -1,
          lm_head = -1;  // −1: not on this stage; lm_head == embed when tied on one stage
  int64_t total = 0;
  // The units the model computes one at a time, in order: the embedding (if
  // held), each decoder block, then the final norm and LM head (if held; a
  // head tied to a held embedding is the embedding unit's matrix).
  std::vector<UnitSpec> units;
  int embed_unit = -1, first_layer_unit = 0, final_unit = -1;

  const ParamSpec& find(const std::string& name) const;  // throws ConfigError listing a few names
};

// With a grid of R > 1 rows (tp.size = R·C) every parameter is cut by
// its grid split (tp::piece, parallel/tp_placement.h): each rank holds a distinct piece, so
// each counts its pieces in the gradient norm.
ParamTable make_param_table(const ModelConfig& cfg, TpRank tp = {}, StageRange stage = {}, EpRank ep = {},
                            const tp::Grid& grid = {});

// Sets every spec's stored_layout, grad_layout and state_layout from the
// store's sharding (its layout, the model's, is unchanged).
void set_state_layouts(ParamTable& table, const StoreSharding& sharding);

// What a store needs of a parameter (its unit's slot), derived from its spec.
ParamSlot param_slot(const ParamSpec& spec);

// Initialises params[0, table.total): element i of parameter p is a pure
// function of (seed, p.name, i) — Philox normal · init_std (· 1/sqrt(2·n_layers)
// for residual output projections), or 1 for norm weights.
void init_params(float* params, const ParamTable& table, const ModelConfig& cfg, uint64_t seed);

// The same rule for any slice of one parameter: local elements [first, first + n)
// of `spec` into out[n], each generated from its index in the FULL tensor
// (padding is zero). A shard generated alone equals the slice of the full tensor.
void init_param_slice(const ParamSpec& spec, const ModelConfig& cfg, uint64_t seed, int64_t first, int64_t n,
                      float* out);

// The table's units (ParamTable::units). For the whole model: 0 = the
// embedding, 1 … n_layers = the decoder blocks, n_layers + 1 = the final norm
// (and the LM head unless tied: a tied head is unit 0's matrix).
std::vector<UnitSpec> make_units(const ParamTable& table, const ModelConfig& cfg);

}  // namespace mt

// The buffer plan: every activation tensor one model chunk allocates, as
// data — its name, shape and allocator kind (core/memory.h) — for a layer,
// for a microbatch slot (one microbatch in flight) and for the backward's
// shared buffers, in each mode (tensor parallelism with or without SP, the
// grid of 2-D tensor parallelism, mixture of experts with or without ep,
// recomputation, pipeline stages). Each layer activation names the module
// that recomputes it (Entry::by): a selective choice moves those entries out of
// a slot's LayerActs into the one shared set. It is the one source of these sizes: the
// model allocates its LayerActs, Slot and Buffers from these entries
// (model/buffer_alloc.cpp) and the memory model (cost/memory_model_parts.cpp)
// sums the same entries, so a buffer added here is allocated and counted at once.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "core/memory.h"
#include "model/config.h"
#include "model/params.h"
#include "model/recompute.h"
#include "parallel/tp_placement.h"

namespace mt::buffers {

// A tensor's shape, up to 3 dims, held in place (the planner sums plans of
// thousands of layouts: no allocation per entry).
class Dims {
 public:
  Dims() = default;
  Dims(std::initializer_list<int64_t> dims);
  std::vector<int64_t> vec() const { return {d_.begin(), d_.begin() + n_}; }
  int64_t numel() const;

 private:
  std::array<int64_t, 3> d_{};
  int n_ = 0;
};

// One tensor: `name` is the member it becomes (LayerActs' "ln1", its MoeActs'
// "moe.probs", Slot's "resid", Buffers' "dres", ...).
struct Entry {
  const char* name = "";
  Dims shape;
  MemKind kind = MemKind::activation;
  // A layer activation: the module that recomputes it under a selective
  // choice (none: kept unless the whole layer is recomputed).
  RecomputeModule by = RecomputeModule::none;
  int64_t numel() const { return shape.numel(); }
};
using List = std::vector<Entry>;

// Σ numel of the entries of kind `kind`.
int64_t floats(const List& list, MemKind kind);

// What a chunk's buffers are sized by.
struct Shape {
  int64_t B = 1, T = 1;            // the most rows of a microbatch and tokens of a sequence on this cp rank
  int64_t tp = 1;                  // the tp group's size (1: no tensor parallelism)
  bool sp = false;                 // sequence parallelism (tp > 1)
  tp::Grid grid;                   // tp::on_grid(grid): 2-D tensor parallelism on an R × C grid
  int64_t ep = 1;                  // the ep group's size: this rank's experts may receive every rank's rows
  Recompute recompute;             // full: one set of layer activations, recomputed in the backward;
                                   // selective: one set of the chosen modules' activations
  bool embed = true, head = true;  // the stage holds the embedding / the final norm, LM head and loss
  std::vector<bool> moe_layers;    // one per stage layer: whether it is a mixture-of-experts layer
  int64_t pieces = 0;              // canonical tp (parallel/canonical_tp.h): this rank's pieces; 0: off
  int64_t kv_slots = 0;            // canonical kv slots (parallel/canonical_tp_kv.h); 0: the kv heads
  int64_t cp_pieces = 0;           // canonical cp (parallel/cp_pieces.h): this rank's pieces; 0: off
  bool split_backward = false;     // a split schedule (pipeline/schedule.h): a slot also keeps, from
                                   // its B to its W, the output gradients the weight gradients need
  int64_t canonical_c = 0;         // canonical 2-D (parallel/canonical_tp_grid.h): the grain c (canonical_tp)
  int64_t canonical_d = 0;         // and the d grain g; 0: off
};

// The widths one rank works with on an R × C grid (docs/PARALLELISM.md "2-D
// tensor parallelism"): its residual-stream features and its local heads and
// hidden channels (…l: of R·C), and the same gathered over one sub-axis (…C:
// of C only; dR: d of R).
struct GridWidths {
  int64_t dl = 0, dR = 0;            // d/(RC), d/R
  int64_t Ql = 0, Kl = 0, QKVl = 0;  // this rank's q, k (and v) widths: H/(RC)·hd, KV/(RC)·hd
  int64_t QC = 0, KC = 0, QKVC = 0;  // the q|k|v GEMM's, before its reduce-scatter over tp_r
  int64_t Fl = 0, FC = 0;            // F/(RC), F/C
  int64_t Vl = 0;                    // ceil(V/C): this rank's vocabulary rows
  GridWidths(const ModelConfig& c, const TpDims& d, const tp::Grid& g);
};

// The router statistics one microbatch carries beside the residual stream
// between pipeline stages (model/llama_internal.h MoeTally): counts [k, E],
// probability sums [E] as float pairs, the z sum (a pair) and the rows.
inline int64_t tally_wire_floats(int64_t k, int64_t E) {
  return k * E + 2 * E + 3;
}
// Those floats for a chunk of `c`: 0 without experts or on a stage holding both ends.
int64_t tally_floats(const ModelConfig& c, const Shape& s);

// One chunk's buffers, each list in allocation order.
struct ChunkPlan {
  List recompute;               // Buffers::recompute[0]: the one set of layer activations (full), or of
                                // those a selective choice recomputes (lent to each layer in turn)
  List shared;                  // the rest of Buffers: the backward's gradients and the tp/SP scratch
  List moe;                     // Buffers' mixture-of-experts part (Llama::moe_init; none without MoE layers)
  List resid;                   // a slot's residual stream: the input of each stage layer, and the output
  List dense_layer, moe_layer;  // a slot's LayerActs of a dense / MoE layer: what it keeps (none when full)
  std::vector<bool> moe_layers;  // Shape::moe_layers
  List head;                     // a slot's last-stage tensors (final norm, logits, losses)
  bool recomputation = false;    // Shape::recompute is full: a slot holds no LayerActs
  // The slot's LayerActs of stage layer l.
  const List& layer(int64_t l) const;
  int64_t layers() const { return static_cast<int64_t>(moe_layers.size()); }
  // Floats of kind `kind`: the shared buffers (recompute, shared, moe), and one slot.
  int64_t shared_floats(MemKind kind) const;
  int64_t slot_floats(MemKind kind) const;
};

ChunkPlan chunk_plan(const ModelConfig& c, const TpDims& d, const Shape& s);

}  // namespace mt::buffers

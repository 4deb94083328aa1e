// The model's private parts, shared by llama.cpp (construction, the stage's
// forward and backward), llama_layer.cpp (one decoder block) and the other
// llama_*.cpp: the saved activations of a layer and of a
// microbatch in flight, the backward's scratch, and the kernel timer.
#pragma once

#include <string>
#include <vector>

#include "core/device_mirror.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "model/buffer_plan.h"
#include "model/llama.h"
#include "ops/primitives.h"
#include "parallel/expert_canonical.h"
#include "parallel/expert_parallel.h"

namespace mt {

// What a mixture-of-experts layer saves for its backward (R ≤ N·k rows in
// expert order, I the expert hidden size; docs/MODEL.md "Mixture of experts").
struct MoeActs {
  Tensor probs;                  // [N, E] router probabilities (fp32 softmax)
  Tensor lse;                    // [N]    logsumexp of the router logits
  Tensor weights;                // [N, k] the chosen experts' renormalised weights
  DeviceArray<int32_t> experts;  // [N, k] the chosen experts, by decreasing score
  ep::RoutePlan plan;            // the choices sorted by expert
  Tensor xs;                     // [R, C]  the tokens of each expert's block
  Tensor xl;                     // [Rl, C] ep > 1: the rows this rank's experts received (expert-major)
  Tensor gu;                     // [Rl, 2I] gate and up of each row's expert (Rl = R, or R·ep with ep > 1)
  Tensor h;                      // [Rl, I]  swiglu(gate, up)
  Tensor yk;                     // [N·k, C] each choice's expert output (zero when dropped)

  // Allocated with its layer (LayerActs' "moe." entries of model/buffer_plan.h).
};

// One microbatch's router statistics, pooled over this stage's MoE layers:
// what the load-balancing loss and the z-loss read (docs/MODEL.md).
struct MoeTally {
  std::vector<int64_t> count;  // [k, E] rows whose s-th choice is expert e
  std::vector<double> psum;    // [E] Σ over rows of the router probability of e
  double zsum = 0;             // Σ over rows of lse²
  int64_t rows = 0;            // router rows: tokens × MoE layers
  double margin = 0;           // the smallest top-k margin seen
  void reset(int64_t k, int64_t E);
  double aux_loss(int64_t E) const;  // Mixtral's, unscaled
  // scale · ∂aux_loss/∂(router probability of e), the same for every row:
  // scale · E · Σ_s count[s, e] / rows² ([E]).
  std::vector<float> aux_grad(int64_t E, double scale) const;
  double z_loss() const { return rows > 0 ? zsum / static_cast<double>(rows) : 0.0; }
  // The sums (count, psum, zsum, rows; not the margin) as one vector of
  // doubles, for a sum over the ranks sharing a microbatch, and back.
  std::vector<double> sums() const;
  void set_sums(const std::vector<double>& v);
  // The sums after a stage's residual stream between pipeline stages
  // (docs/PARALLELISM.md "Expert parallelism"): counts and rows as floats
  // (exact below 2^24), each double as a float pair hi + lo.
  static int64_t wire_floats(int64_t k, int64_t E) { return buffers::tally_wire_floats(k, E); }
  void write_wire(float* out) const;
  void read_wire(const float* in);
};

// What one layer saves for its backward (N = B·T tokens; Nl = the residual
// stream's tokens here, N / tp under sequence parallelism, else N; the widths
// are this rank's under tensor parallelism).
struct Llama::LayerActs {
  Tensor ln1;       // [N, C]      rmsnorm₁(x), without SP
  Tensor ln1_full;  // [N, C]      with SP: rmsnorm₁ of every rank's tokens, gathered over tp
                    //             (the q|k|v GEMM's input; this rank's own rows are not kept twice)
  Tensor rstd1;     // [Nl]
  Tensor qkv;       // [N, (Hl+2KVl)·D] q and k after RoPE
  Tensor att;       // [N, Hl·D]   attention output (heads concatenated)
  Tensor lse;       // [B, Hl, T]
  Tensor mid;       // [Nl, C]     residual stream after attention
  Tensor ln2;       // [N, C]      without SP; [Nl, C] with SP in a mixture-of-experts layer
  Tensor ln2_full;  // [N, C]      with SP
  Tensor rstd2;     // [Nl]
  Tensor gu;        // [N, 2Fl]    gate and up (dense layers)
  Tensor h;         // [N, Fl]     swiglu(gate, up)
  Tensor att_full;  // [N, Q/C]    grid: att gathered over tp_r (o_proj's input)
  Tensor h_full;    // [N, F/C]    grid: h gathered over tp_r (down_proj's input)
  MoeActs moe;      // mixture-of-experts layers
  // A split backward (Llama::backward_input_slot), from B to W: the output
  // gradients of down [Nl, C] (after dropout's mask), gate|up [N, 2Fl], o
  // [Nl, C] and q|k|v [N, QKVl], and the two norms' weight gradients [2, C].
  Tensor w_down, w_gu, w_o, w_qkv, w_norms;

  LayerActs() = default;
  // Every tensor of `plan` (model/buffer_plan.h chunk_plan's layer lists),
  // each into the member it names, in the plan's order.
  explicit LayerActs(const buffers::List& plan);
  Tensor& member(const char* name);
};

// What one microbatch in flight keeps between its forward and its backward.
struct Llama::Slot {
  int64_t B = 0, T = 0, N = 0, Nl = 0;
  std::vector<Tensor> resid;      // stage layers + 1 tensors [Nl, C]: the input of each layer, and the output
  std::vector<LayerActs> layers;  // one per stage layer (none with recomputation)
  Tensor lnf, rstdf;              // last stage: final norm [Nl, C], [Nl]; with SP lnf is also the scratch of
                                  // every norm's local output before its all-gather
  Tensor lnf_full;                // last stage, SP: [N, C]
  Tensor logits;                  // last stage: [N, Vl]; the backward turns it into dlogits in place
  Tensor losses, lse_ce;          // last stage: [N]
  Tensor w_lnf;                   // split backward, last stage: the final norm's weight gradient [C]
  Tensor w_embed;                 // split backward, first stage: the embedding output's gradient [Nl, C]
  std::vector<int32_t> inputs, targets, pos;
  // Dropout's coordinates: the global sequence of each batch row [B], and the
  // global sequence and position of each residual-stream row here [Nl].
  std::vector<int64_t> seq_rows, seq_resid;
  std::vector<int32_t> pos_resid;
  // The same on the run's device, where the kernels read them (uploaded by
  // forward_slot: the "tokens" and "positions" crossings).
  DeviceMirror<int32_t> d_inputs, d_targets, d_pos, d_pos_resid;
  DeviceMirror<int64_t> d_seq_rows, d_seq_resid;
  bool has_targets = false;
  MoeTally tally;  // its router statistics (mixture of experts)

  Slot() = default;
  // Slot `plan` describes: its residual stream, its layers' LayerActs
  // (none with recomputation) and the head's tensors.
  explicit Slot(const buffers::ChunkPlan& plan);
  Tensor& member(const char* name);
};

// Scratch shared by every microbatch: the backward's gradients (one backward
// runs at a time) and, with recomputation, the one set of layer activations.
struct Llama::Buffers {
  std::vector<LayerActs> recompute;  // one set, with recomputation
  Tensor norm_out;                   // [Nl, C] SP scratch of a norm's local output (stages without the head)
  Tensor dres, dtmp;                 // [Nl, C] residual-stream gradient and scratch
  Tensor dmid;                       // [N, max(C, Fl, Hl·D)] scratch for a layer's inner gradients
  Tensor dqkv, dgu;                  // [N, (Hl+2KVl)·D], [N, 2Fl]
  // Tensor parallelism: part [N, C] holds a row layer's partial output or a
  // column layer's partial input gradient before the reduction over tp; under
  // SP, dfull [N, C] is a gathered residual gradient and dln [Nl, C] a
  // reduce-scattered one. normg [2, C] collects the norm weights' partial
  // gradients (SP) and kvg [2·KVl·D, C] a replicated kv head's gradient.
  Tensor part, dfull, dln, normg, kvg;
  Tensor leaves;    // the canonical mode's per-piece partial sums (parallel/canonical_tp.h)
  Tensor nshards;   // the canonical mode's per-shard norm weight gradients (linear_plan.h NormEntry)
  Tensor pieces2d;  // the canonical mode's d-piece scratch (parallel/canonical_tp_grid.h)
  Tensor cpwg;      // the canonical mode's per-cp-piece weight gradients (parallel/cp_pieces.h)
  // Per stage layer: the canonical mode's expert leaves under ep (parallel/expert_canonical.h), else empty.
  std::vector<ep::ExpertLeaves> expert_leaves;
  // Mixture of experts: router logits and their gradient [N, E], the weights'
  // gradient [N, k], and the expert rows' gradients [N·k, C], [N·k, 2I], [N·k, I].
  Tensor rlogits, drlogits, dweights, dyk, dys, dxs, dgu_e, dh_e;
  Tensor xfer;              // [R·ep, C] ep > 1: the expert-major side of an exchange
  Tensor moeg;              // SP: one MoE layer's router and expert gradients, partial over tp until summed
  Tensor grid;              // on a grid: the scratch of the plan's grid entries (layers and ends)
  buffers::ChunkPlan plan;  // what every buffer of this chunk is (model/buffer_plan.h)

  // Allocates `list`'s entries (plan.shared or plan.moe) into the members they name.
  void allocate(const buffers::List& list);
  Tensor& member(const char* name);
};

// The widths one rank works with on an R × C grid of the tp ranks (model/buffer_plan.h).
using GridWidths = buffers::GridWidths;

// Generation's buffers (llama_decode.cpp): one decode step's rows through the
// stage, sized to the largest step so far. The layers share one set of
// activations: nothing is kept for a backward.
struct Llama::DecodeState {
  int64_t rows = 0;   // the rows they hold
  Slot slot;          // the step's positions and router tally (what the layers read of a slot)
  LayerActs acts;     // [rows, …] as LayerActs
  Tensor out;         // [rows, C] the residual stream's other buffer
  Tensor lnf, rstdf;  // [rows, C], [rows]: the head's final norm
};

// Adds the elapsed time of a scope to one kernel family when profiling.
class KernelScope {
 public:
  KernelScope(KernelTimes& t, Kernel k, bool on) : t_(on ? &t : nullptr), k_(k) {}
  ~KernelScope() {
    if (t_ != nullptr) t_->seconds[static_cast<int>(k_)] += timer_.seconds();
  }

 private:
  KernelTimes* t_;
  Kernel k_;
  Timer timer_;
};

inline void add_inplace(float* y, const float* x, int64_t n) {
  add(y, x, n);
}

#define MT_TIMED(kernel) KernelScope scope_##__LINE__(times_, kernel, opts_.profile)

inline std::string site_of(int64_t l, const char* what) {
  return "layer " + std::to_string(l) + " " + what;
}

}  // namespace mt

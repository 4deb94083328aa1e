// The Llama decoder, forward and backward written out per block (llm.c style):
//
//   x₀ = embed(ids)
//   for each layer l:  a = x + o_proj(attn(rope(qkv(rmsnorm₁(x)))))
//                      x = a + down(swiglu(gate_up(rmsnorm₂(a))))
//   logits = lm_head(rmsnorm_f(x_L));  loss = Σ_valid CE(logits, targets) / n_valid_global
//
// Tensor parallelism (Megatron): q|k|v and gate|up are column-parallel, o and
// down row-parallel, so each half-block has one reduction over tp forward
// (after o, after down) and one backward (the input gradient of q|k|v, of
// gate|up); the embedding, LM head and cross-entropy are vocab-parallel. With
// sequence parallelism the residual stream and the norms hold N/tp tokens:
// each reduction becomes an all-gather before the column layer and a
// reduce-scatter after the row layer, and the norm weights' gradients, partial
// over the token shards, are summed over tp once per layer and microbatch.
//
// On an R × C grid of the tp ranks (R > 1; docs/PARALLELISM.md "2-D tensor
// parallelism") the same code runs other plan entries: a residual stream of
// d/(RC) features, every weight split on both dims, an all-gather over one
// sub-axis and a reduce-scatter over the other around each linear layer.
// Which collective runs where is the linear plan's (parallel/linear_plan.h),
// built once from the plan table and the run's tp groups: the model calls
// each site's entry and names no collective.
//
// The model owns its parameters, gradients (both flat, see params.h) and the
// activations of one microbatch of at most max_batch × max_seq tokens. With
// full recomputation a layer keeps only its input (selective: model/recompute.h)
// and recomputes the rest in its backward with the same kernels on the same
// inputs: bitwise the same result.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "comm/group.h"
#include "core/tensor.h"
#include "mesh/mesh_view.h"
#include "model/config.h"
#include "model/params.h"
#include "model/recompute.h"
#include "ops/attention.h"
#include "ops/dropout.h"
#include "ops/rope.h"
#include "parallel/attention_strategy.h"
#include "parallel/cp_attention.h"
#include "parallel/expert_parallel.h"
#include "parallel/linear_plan.h"
#include "parallel/probe.h"
#include "parallel/store.h"
#include "parallel/tensor_parallel.h"
#include "pipeline/stage.h"

namespace mt {

inline constexpr int32_t kIgnoreIndex = -1;
struct MoeTally;  // a microbatch's router statistics (llama_internal.h)

// Time spent per kernel family, for the benchmark's breakdown.
enum class Kernel : int { gemm, attention, rmsnorm, rope, swiglu, embedding, cross_entropy, other, count_ };
const char* kernel_name(Kernel k);
struct KernelTimes {
  std::array<double, static_cast<int>(Kernel::count_)> seconds{};
  void clear() { seconds.fill(0.0); }
};

struct ModelOptions {
  int64_t max_batch = 1;  // sequences per microbatch
  int64_t max_seq = 0;    // tokens per sequence (≤ max_seq_len); 0 means max_seq_len
  Recompute recompute;    // what the backward recomputes (model/recompute.h)
  bool profile = false;   // fill kernel_times() (adds a clock read per kernel)
  // The mesh's groups this chunk communicates over, by axis (mesh/mesh_view.h;
  // null or size 1: that axis is off). With tp the model holds and computes
  // this rank's shard (params.h) and communicates over tp itself; with cp it
  // holds T = max_seq tokens of each sequence of T·cp, in the zigzag layout of
  // parallel/context_parallel.h (positions are global), and its attention
  // exchanges keys and values over cp; with ep it holds its n_experts / ep
  // experts and exchanges tokens over ep (parallel/expert_parallel.h); with
  // dp_cp the aux-loss-free router bias moves by the step's per-expert counts
  // summed over it, the global counts, so every layout takes the one-process step.
  MeshView mesh;
  // Sequence parallelism between the TP regions.
  bool sp = false;
  bool tp_overlap = false;  // chunked TP GEMMs overlapping their collectives (TpLayer::overlap)
  // The tp group's shape (the configured grid; parallel/tp_placement.h). On a
  // grid of R > 1 rows the model holds this rank's grid pieces and its plan
  // runs the grid's entries over mesh.tp_r and mesh.tp_c. R = 1 is 1-D tp.
  tp::Grid grid;
  // The tensor-parallel plan table the model executes (null: tp::llama_plan()).
  // A table naming a site the model lacks, or missing one of its sites, is
  // refused at construction (parallel/linear_plan.h).
  const std::vector<tp::PlanRow>* plan = nullptr;
  // Pipeline parallelism: the layers (and ends) this stage holds (params.h).
  StageRange stage;
  // Context parallelism: how attention exchanges over mesh.cp (ring, all-gather, Ulysses, hybrid).
  cp::CpImpl cp_impl = cp::CpImpl::ring;
  // Mixture of experts: the dp ranks whose microbatches make the step's batch. The router losses are
  // a mean over all those microbatches: each one's weight is coef / (microbatches x moe_groups).
  int64_t moe_groups = 1;
  // train --fingerprint (parallel/probe.h): each site's activations and gradients at global coordinates.
  ActivationProbe* probe = nullptr;
  // The canonical mode (ep: parallel/expert_canonical.h), its grains above 1 in one process too (0: off):
  // canonical_tp pieces (parallel/canonical_tp.h, _kv.h), canonical_cp pieces (parallel/cp_canonical.h).
  bool canonical = false;
  int64_t canonical_tp = 0, canonical_cp = 0, canonical_tp_d = 0;  // _tp_d: canonical_tp_grid.h
  bool split_backward = false;  // B and W apart (pipeline/stage.h): a slot keeps what W needs
};

// A step's mixture-of-experts statistics on this rank, from the microbatches
// whose backward ran (the metrics moe_*; docs/MODEL.md "Mixture of experts").
struct MoeStats {
  std::vector<int64_t> layers;                          // the model's index of each MoE layer here
  std::vector<std::vector<int64_t>> tokens_per_expert;  // [MoE layer][E] choices routed to each expert
  int64_t dropped = 0;                                  // choices over an expert's capacity
  double aux_loss = 0, z_loss = 0;  // mean over the microbatches (unscaled by their coefficients)
  double min_topk_margin = 0;       // +inf when top_k = n_experts
  int64_t microbatches = 0;
  // Whether this rank's tokens are its own: false on tp ranks > 0 without SP,
  // which route copies of tp rank 0's tokens (the counts are then its).
  bool token_owner = true;
};

class Llama : public pp::Stage {
 public:
  // With no store, the model keeps its parameters and gradients itself
  // (LocalStore: one process). A distributed run passes the store of its layout.
  Llama(const ModelConfig& cfg, const ModelOptions& opts, std::unique_ptr<ParamStore> store = nullptr);
  ~Llama() override;
  Llama(const Llama&) = delete;
  Llama& operator=(const Llama&) = delete;

  const ModelConfig& config() const { return cfg_; }
  int64_t canonical_cp() const { return opts_.canonical_cp; }  // the cp grain; 0: off
  const ParamTable& param_table() const { return table_; }
  const std::vector<UnitSpec>& units() const { return units_; }
  ParamStore& store() { return *store_; }
  int64_t num_params() const { return table_.total; }

  // This rank's share of the parameters and gradients. For a model with its own
  // LocalStore that is the whole flat buffer, indexed by ParamSpec::offset.
  float* params() { return store_->local_params(); }
  const float* params() const { return store_->local_params(); }
  float* grads() { return store_->local_grads(); }

  // Initialisation by the pure rule of params.h; every rank generates only what it owns.
  void init(uint64_t seed);
  void zero_grads() { begin_step(1); }

  // Forward of B sequences of T tokens (inputs, targets [B, T]; targets may hold
  // kIgnoreIndex). Returns the SUM of the valid tokens' losses (in double); the
  // caller divides by the global valid-token count. targets may be null: then
  // only the logits are computed (returns 0).
  double forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T);

  // Backward of the last forward: accumulates parameter gradients (+=) for the
  // loss Σ_valid CE · dloss, where dloss = 1 / (global valid-token count).
  void backward(float dloss);

  // Logits [B, T, V] of the last forward (valid until backward, which reuses
  // them). Without tensor parallelism only: a tp rank holds a slice of the vocabulary.
  const float* logits() const;

  // ---- Pipeline stages: several microbatches in flight ----
  // Each microbatch in flight keeps its activations in a slot (0, 1, …),
  // allocated on first use and reused after; the schedule decides how many are
  // ever live (GPipe: all microbatches; 1F1B: at most the stages after this one).
  // forward_slot: a stage with the embedding reads `inputs` (ids [B, T]); any
  // other reads its input activation, written into stage_input(slot) [Nl, C]
  // before the call (Nl = B·T, or B·T/tp under SP). A stage with the head
  // needs `targets` and returns its loss sum; any other returns 0 and leaves its
  // output in stage_output(slot) [Nl, C]. (Each of these buffers, and the two
  // below, holds residual_numel floats: a mixture of experts adds its tally.)
  double forward_slot(int slot, const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) override;
  // backward_slot: a stage with the head starts from dloss; any other from the
  // gradient of its output, written into output_grad() [Nl, C] before the call.
  // Afterwards a stage without the embedding finds the gradient of its input in
  // input_grad() (valid until the next backward); B and W apart: model/llama_split.cpp.
  void backward_slot(int slot, float dloss) override;
  void backward_input_slot(int slot, float dloss) override;
  void backward_weight_slot(int slot) override;
  float* stage_input(int slot) override;
  const float* stage_output(int slot) override;
  float* output_grad() override;
  const float* input_grad() const override;
  // Elements of one microbatch's residual stream here: B·T·C, or B·T/tp·C
  // under SP; for a mixture of experts over pipeline stages followed by the
  // microbatch's router statistics (tally_floats()), which travel with the
  // activation forward and with its gradient backward.
  int64_t residual_numel(int64_t B, int64_t T) const override {
    return plan_.rows(B * T) * resid_width() + tally_floats();
  }
  // The stage's share of the step's gradient accumulation: its store's (store.h).
  void begin_step(int64_t microbatches) override;
  void begin_microbatch(int64_t index, int64_t microbatch) override {
    microbatch_ = index, microbatch_number_ = microbatch;
    store_->begin_microbatch(index, microbatch);
  }
  void finish_grads() override { store_->finish_grads(); }
  void set_forward_rows(int64_t first_row) override { next_first_row_ = first_row; }
  // Dropout (model.attention_dropout, model.hidden_dropout; docs/MODEL.md
  // "Dropout") in the forwards and backwards that follow, its masks keyed by
  // (seed, step); clear_dropout turns it off (evaluation runs without).
  void set_dropout(uint64_t seed, int64_t step) { drop_ = {seed, step, true}; }
  void clear_dropout() { drop_.on = false; }
  // ---- Generation (llama_decode.cpp; infer/decoder.h drives it) ----
  // The model's own embedding, layers and head over the rows of one decode
  // step, each layer's attention by `attention` (the KV cache's strategy,
  // infer/kv_attention.h), in buffers of their own sized to the largest step.
  // check_generation: ConfigError naming what generation does not run — 2-D
  // tensor parallelism, expert parallelism (ep > 1), sequence parallelism,
  // dropout (every decode_* call checks it; infer/decoder.h at construction).
  void check_generation() const;
  // x [rows, C] = the embedding of ids [rows] (vocab-parallel under tp); the first stage.
  void decode_embed(float* x, const int32_t* ids, int64_t rows);
  // This stage's layers over x [rows, C] in place: the step's rows, or under
  // cp this rank's block of them (every cp rank calls it, rows = 0 included).
  void decode_layers(float* x, const int32_t* pos, int64_t rows, AttentionStrategy& attention);
  // logits [rows, vocab rows here] of x [rows, C]: the final norm and this
  // rank's rows of the LM head; the last stage.
  void decode_head(float* logits, const float* x, int64_t rows);

  bool has_embed() const { return table_.embed_unit >= 0; }
  bool has_head() const { return table_.final_unit >= 0; }
  int slots_allocated() const { return static_cast<int>(slots_.size()); }

  // This rank's share of the model under tensor parallelism ({1, 0}: all of it).
  TpRank tp_rank() const { return tpr_; }
  // The plan the model executes: each linear site's entry (--explain prints it).
  const tp::LinearPlan& linear_plan() const { return plan_; }
  Group* tp_group() const { return MeshView::live(opts_.mesh.tp); }  // null without tensor parallelism

  // The router losses of slot 0's last forward, unscaled by their
  // coefficients: Mixtral's load-balancing loss and the z-loss (0 when dense).
  double moe_aux_loss() const;
  double moe_z_loss() const;
  // The mixture of experts' statistics of the current step (reset by begin_step).
  const MoeStats& moe_stats() const { return moe_stats_; }
  // The aux-loss-free balancing bias of stage layer l ([E]; empty when off).
  const std::vector<float>& router_bias(int64_t l) const { return router_bias_[static_cast<size_t>(l)]; }
  // The same by the model's layer index, for the MoE layers of this stage
  // (what a training checkpoint saves and restores; null: not here).
  const std::vector<float>* router_bias_of_layer(int64_t layer) const;
  void set_router_bias_of_layer(int64_t layer, const std::vector<float>& bias);
  const KernelTimes& kernel_times() const { return times_; }
  KernelTimes& kernel_times() { return times_; }

 private:
  struct LayerActs;
  struct Slot;
  struct Buffers;
  struct DecodeState;  // generation's buffers (llama_decode.cpp)
  DecodeState& decode_state(int64_t rows);
  // out [N, C] = the embedding rows of ids [N] from `table` (vocab-parallel under tp).
  void embed_rows(float* out, const int32_t* ids, const float* table, int64_t N);
  Slot& slot(int i);
  void use_slot(int i);  // the slot the kernels below read and write
  int layer_unit(int64_t i) const { return table_.first_layer_unit + static_cast<int>(i); }
  bool has_moe_layer() const {
    return std::any_of(rel_.begin(), rel_.end(), [](const LayerParamOffsets& o) { return o.moe(); });
  }
  bool has_dense_layer() const {
    return std::any_of(rel_.begin(), rel_.end(), [](const LayerParamOffsets& o) { return !o.moe(); });
  }
  bool head_in_embed_unit() const { return cfg_.tie_embeddings && table_.embed_unit >= 0; }
  float* norm_scratch();
  // Where a norm writes its output: `kept` when the layer keeps it, else the
  // norm scratch (under SP the GEMM after it keeps the gathered output).
  float* norm_output(Tensor& kept) { return kept.empty() ? norm_scratch() : kept.data(); }
  // The plan's sites, in the order of the model's list (model_sites).
  enum Site : size_t { kQkv, kO, kGateUp, kDown, kEmbed, kHead, kNorms, kFinalNorm, kRouter, kExperts };
  std::vector<tp::ModelSite> model_sites() const;
  void make_plan(Group* kv);  // plan_ and labels_ (construction; kv: the kv-replica group)
  std::string_view final_norm_site() const { return plan_.entry(kFinalNorm).site; }
  // The ledger sites of one stage layer's entries ("layer 3 attn qkv").
  struct LayerLabels {
    std::string qkv, kv, o, gate_up, down, norms, router;
  };

  // l: the layer's index in this stage. P: its unit parameters (unit-relative offsets in rel_[l]).
  // x_out may be null (recomputation): the layer output is then not computed.
  void layer_forward(int64_t l, const float* P, LayerActs& a, const float* x_in, float* x_out);
  void layer_backward(int64_t l, const float* P, float* G, LayerActs& a, const float* x_in, float* dres);
  friend struct SplitBackward;  // model/llama_split.cpp: B and W of the layers and the head
  // The stage's layers backward, last to first, from dres (the gradient of
  // their output) to that of their input, recomputing each first when asked.
  void layers_backward(Slot& sl);
  // Selective recomputation: the chosen modules' activations again, from what layer l keeps.
  void layer_recompute(int64_t l, const float* P, LayerActs& a, const float* x_in);
  void attention_core_forward(int64_t l, LayerActs& a);
  void attention_core_backward(int64_t gl, LayerActs& a);
  // Selective: swaps the shared recomputed tensors into (again: out of) a slot's LayerActs.
  void lend_recomputed(LayerActs& a);
  const float* dropped_grad(int64_t gl, const char* site, const float* dres);
  double head_forward(Slot& sl);  // the last stage's final norm, LM head and loss sum (llama_head.cpp)
  float* head_backward(float dloss);
  LayerActs& acts_for(int64_t l);
  // The mixture of experts in place of the MLP of stage layer l (llama_moe.cpp):
  // forward from a.ln2 into x_out = mid + Σ weights · experts (x_out null: the
  // activations only; tally: add the router statistics to the slot's), and
  // backward from dres = dL/dx_out, leaving dL/d(ln2) in the dmid buffer.
  // The layer runs on this rank's Nl tokens: its sequence shard under SP, else
  // all N (replicated over tp without SP); docs/PARALLELISM.md "Expert parallelism".
  void moe_forward(int64_t l, const float* P, LayerActs& a, float* x_out, bool tally);
  void moe_backward(int64_t l, const float* P, float* G, LayerActs& a, const float* dres, float* dln2);
  // Adds one layer's router statistics to the slot's tally (experts: its choices, on the host).
  void moe_tally_layer(const LayerActs& a, const int32_t* experts, double margin);
  void write_tally(const MoeTally& t, float* wire) const;  // onto the wire, on the device
  template <class F>
  void for_each_expert(F&& f) const;  // f(e) for each local expert (llama_moe.cpp)
  // gexp: the layer's first expert's gradient (w1|w3, then w2, per local expert).
  void moe_experts_backward(const LayerParamOffsets& o, const float* P, float* gexp, LayerActs& a,
                            const float* dys, float* dxs);
  // The microbatch's router statistics made whole (llama_moe_tally.cpp): at
  // the end of a forward, this stage's summed over the ranks sharing the
  // microbatch's tokens (cp; tp under SP) plus those of the stages before
  // (read after the input activation), passed on after the output; in the
  // backward the last stage's totals, passed back after the gradients.
  int64_t tally_floats() const;
  void moe_tally_forward(Slot& sl);
  void moe_tally_backward(Slot& sl);
  void moe_init();                          // buffers, the bias, the statistics (construction)
  void moe_after_backward(const Slot& sl);  // the losses' statistics; after the last backward, the bias nudge
  // Where a column layer's input gradient [Nl, C] lands: dmid without tp, the
  // tp scratch part without SP, dln with SP (part then holds the partial sum)
  // and on a grid.
  float* column_dinput_buffer();
  // The mask of `site` ("attn", "o_proj", "down_proj") of model layer gl at
  // rate p in the current step; off outside training or at p = 0.
  DropoutKey dropout_at(int64_t gl, const char* site, double p) const;
  // The attention dropout of model layer gl for the current slot, in *storage;
  // null when off.
  const AttentionDropout* attention_dropout(int64_t gl, AttentionDropout* storage) const;
  // Where the rows of the current slot's residual stream sit (hidden dropout).
  TokenCoords residual_coords() const;
  void dropout_coords(Slot& sl) const;  // the slot's seq_rows, seq_resid, pos_resid
  void upload_slot(Slot& sl) const;     // their device copies, and the ids, targets and positions
  bool sp_on() const { return tp_group() != nullptr && opts_.sp; }
  // --fingerprint (llama_probe.cpp): tensor `name` of model layer gl, its rows
  // the microbatch's N tokens (batch) or the residual stream's Nl, its columns
  // entry e's output or input side as the plan places them (the residual
  // stream's when e is null). Nothing without a probe or while recomputing.
  enum class ProbeRows { batch, resid };
  void probe(int64_t gl, const char* name, bool grad, const float* v, ProbeRows rows,
             const tp::LinearEntry* e = nullptr, bool out = true) const {
    if (opts_.probe != nullptr && !recomputing_) probe_record(gl, name, grad, v, rows, e, out);
  }
  void probe_record(int64_t gl, const char* name, bool grad, const float* v, ProbeRows rows,
                    const tp::LinearEntry* e, bool out) const;
  bool recomputing_ = false;  // layers_backward's recomputation of a layer (not probed twice)
  Group* cp_group() const { return MeshView::live(opts_.mesh.cp); }  // null without context parallelism
  // Features of a residual-stream row here: d_model, or d_model / tp on a grid.
  int64_t resid_width() const { return plan_.width(); }
  // On a grid (llama.cpp): buffers and slot 0 sized by GridWidths.
  void check_grid() const;  // a grid's start-up rules (tp::check_grid)
  void embed_forward(Slot& sl);
  void embed_backward(Slot& sl, float* Eg);

  ModelConfig cfg_;
  ModelOptions opts_;
  cp::CpAttention cp_attention_;                   // local, ring or all-gather: chosen here, once
  AttentionStrategy* attention_ = &cp_attention_;  // what the layers call: cp_attention_, or generation's
  TpRank tpr_;
  TpDims td_;
  int64_t kv_att_ = 0;               // the kv heads attention reads: td_.kv_heads, or (kv_slots_) its slots
  bool kv_slots_ = false;            // the canonical mode's kv slots (parallel/canonical_tp_kv.h)
  tp::LinearPlan plan_;              // every linear site's entry, the norms', the residual stream's shape
  std::vector<LayerLabels> labels_;  // per stage layer
  ParamTable table_;
  std::vector<UnitSpec> units_;
  std::vector<LayerParamOffsets> rel_;  // per stage layer, offsets within its unit
  int64_t n_stage_layers_ = 0;
  int64_t norm_rel_ = 0, head_rel_ = 0;  // within the final unit (head: within the embedding unit when tied)
  int head_unit_ = -1;
  RopeScaling rope_scaling_;  // cfg_.rope_scaling, parsed once
  RopeTable rope_;
  std::unique_ptr<ParamStore> store_;
  std::unique_ptr<Buffers> buf_;
  std::unique_ptr<DecodeState> decode_;
  std::vector<std::unique_ptr<Slot>> slots_;
  Slot* cur_ = nullptr;
  KernelTimes times_;
  ep::ExpertDispatch dispatch_;                  // the tokens' way to their experts and back
  std::vector<std::vector<float>> router_bias_;  // per stage layer: [E] (MoE layers with bias on), else empty
  MoeStats moe_stats_;
  int64_t microbatches_ = 1, microbatch_ = 0, microbatch_number_ = 0;  // step's; backward's index, number
  struct DropoutRun {
    uint64_t seed = 0;
    int64_t step = 0;
    bool on = false;
  } drop_;
  int64_t next_first_row_ = 0;  // the next forward's first global sequence (set_forward_rows)
  int64_t B_ = 0, T_ = 0;       // shape of the last forward
  int64_t N_ = 0, Nl_ = 0;      // its tokens, and those of the residual stream here (N / tp under SP)
};

}  // namespace mt

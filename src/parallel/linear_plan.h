// The tensor-parallel plan that the model executes. The plan table of
// tp_plan.h says how each weight is split; a LinearPlan, built once when the
// model is constructed from that table, the model's sites and the run's tp
// groups, holds one entry per linear site (q|k|v, o, gate|up, down, the
// embedding, the LM head), the norms' entry and the residual stream's shape.
// Each entry yields everything its execution needs: which groups gather,
// scatter and reduce, forward and backward. The model calls forward/backward
// on an entry and names no collective (docs/ARCHITECTURE.md "The linear plan").
//
//   form      column role (q|k|v, gate|up, head)   row role (o, down)
//   local     GEMM                                 GEMM
//   megatron  tensor_parallel.h column layer:      row layer: all-reduce out over
//             backward all-reduce of dinp over     tp (SP: reduce-scatter; backward
//             tp (SP: all-gather of the input      all-gather of dout), optionally
//             over tp, reduce-scatter of dinp)     overlapped (tp_overlap.h)
//   grid      tp2d_linear.h row-in: gather over    col-in: gather over tp_r, scatter
//             tp_c, scatter over tp_r              over tp_c
//
// On a grid the head gathers its input over tp_c and all-reduces the logits
// over tp_r; the embedding reduce-scatters its lookup over tp_c, and the
// norms sum their squares over tp. Under SP the norms' weight gradients, and
// those of any replicated weight that reads only this rank's tokens, are
// Partial over tp: PartialGrads sums them once.
//
// Argument grammar as tensor_parallel.h: outputs and saved tensors first,
// then inputs and weights, then sizes, then the entry. Scratch is bound once
// (bind). Parameter gradients accumulate (+=), activation gradients are
// assigned.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "comm/group.h"
#include "parallel/canonical_tp.h"
#include "parallel/canonical_tp_grid.h"
#include "parallel/canonical_tp_kv.h"
#include "parallel/probe.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp_placement.h"
#include "parallel/tp_plan.h"
#include "parallel/vocab_parallel.h"

namespace mt::tp {

// The run's tp groups, as the layout builds them (ModelOptions).
struct TpGroups {
  Group* tp = nullptr;  // null or size 1: no tensor parallelism
  bool sp = false;      // sequence parallelism between the TP regions (1-D only)
  bool overlap = false;
  Grid grid;              // rows > 1: a grid, with its sub-axes
  Group* tp_r = nullptr;  // the R ranks of this rank's grid column
  Group* tp_c = nullptr;  // the C ranks of this rank's grid row
  Group* kv = nullptr;    // the ranks sharing this rank's kv heads (tp > n_kv_heads); null: none
  // The canonical mode's tp grain c (parallel.canonical_tp, canonical_tp.h) when
  // it is above 1: the linear sites and the head run in c fixed pieces, c / tp
  // on this rank, in one process too. 0: the forms below as they are.
  int64_t canonical_tp = 0;
  // The canonical mode's cp pieces on this rank (parallel.canonical_cp / cp,
  // cp_pieces.h) when the grain is above 1: every weight gradient is a tree
  // over them, the norms' too (their token shards). 0: off.
  int64_t cp_pieces = 0;
  // The canonical mode's d grain g (parallel.canonical_tp_d, canonical_tp_grid.h)
  // when above 1: every site cut on both dims, the norms' sums over g d
  // pieces (a grid, or one process). 0: none.
  int64_t canonical_d = 0;
};

enum class Form { local, megatron, grid };
const char* form_name(Form f);  // "local", "megatron", "grid"

// What a model site does with its weights.
enum class SiteUse { linear, embedding, head, norm, local };

// One weight of a model site and the role the model's data flow is written
// for (q|k|v's heads are sharded before the attention, so q is column).
struct SiteWeight {
  std::string_view suffix;  // the plan row's: "self_attn.q_proj.weight"
  Role role;
};

// A site of the model, as the model declares it. Widths are this rank's in
// 1-D terms: the model width d where the activation is whole, this rank's
// heads or channels (TpDims) where it is sharded. On a grid the plan divides
// the model width by R and multiplies the sharded side by R.
struct ModelSite {
  std::string_view name;  // "attn qkv": the plan rows' site of its first weight
  SiteUse use = SiteUse::linear;
  std::vector<SiteWeight> weights;  // fused into the site's one GEMM, in block order
  int64_t in = 0;                   // linear, head: input features; embedding: the table's width
  std::vector<int64_t> out_blocks;  // linear, head: output features by fused block
  VocabShard vocab;                 // embedding: this rank's vocabulary rows (grid: of its tp_c rank)
  KvSlots kv_slots = {};            // q|k|v in the canonical mode with c > n_kv_heads (canonical_tp_kv.h)
};

// One linear site's plan entry.
struct LinearEntry {
  std::string_view site;  // "attn qkv"
  SiteUse use = SiteUse::linear;
  Role role = Role::column;
  Form form = Form::local;
  int64_t in = 0, out = 0;  // the local GEMM's input and output features (embedding: width)
  std::vector<int64_t> out_blocks;
  Group* tp = nullptr;  // megatron: the layer's group
  SequenceParallel sp = SequenceParallel::off;
  Overlap overlap = Overlap::off;
  Group* gather = nullptr;   // grid: the input is all-gathered over it forward
  Group* scatter = nullptr;  // grid: the output is reduce-scattered over it forward
  Group* reduce = nullptr;   // grid head: the logits are all-reduced over it forward
  Group* vocab = nullptr;    // embedding, head: the vocabulary's split (cross-entropy)
  VocabShard vocab_rows;     // embedding: this rank's rows
  Group* kv = nullptr;       // megatron q|k|v: replicated kv rows summed over it backward
  int64_t kv_first = 0, kv_count = 0;
  std::string_view kv_site;  // the plan site of its kv-replicated weights ("attn k|v")
  int64_t pieces = 0;        // canonical: this rank's pieces of the split dim (canonical_tp.h); 0: none
  // canonical q|k|v with c > n_kv_heads: its kv slots (canonical_tp_kv.h); then
  // out_blocks are the activation's [Q, S·D, S·D], the weight's kv rows KVl·D.
  KvSlots slots = {};
  int64_t dpieces = 0;  // canonical 2-D: this rank's d pieces of the weight (canonical_tp_grid.h); 0: none

  TpLayer layer(std::string_view label) const { return {tp, label, sp, overlap}; }
  // Whether the forward gathers its input (then saved: the backward's GEMM input).
  bool gathers() const;
};

// The norms' entry: local, or on a grid with the sums of squares over tp;
// under SP their weight gradients are Partial over `partial`.
// In the canonical mode (c = parallel.canonical_tp > 1) the weight gradient
// is a sum over the microbatch's N tokens cut into c fixed shards — shard s is
// what SP rank s holds at tp = c — each shard's sum formed apart, then the
// canonical tree over shards: this rank's `shards` (c, or c / tp under SP)
// here, the ranks' roots by PartialGrads (SumOrder::tree).
struct NormEntry {
  Group* sums = nullptr;     // grid: tp
  Group* partial = nullptr;  // SP: tp
  int64_t width = 0, d = 0;  // this rank's features of a row, and the row's
  int64_t shards = 0;        // canonical: this rank's token shards; 0: one sum over its rows
  int64_t dpieces = 0;       // canonical 2-D: this rank's d pieces of a row (canonical_tp_grid.h); 0: none
};

// Scratch the entries use, bound once after the model allocates it.
struct LinearScratch {
  float* part = nullptr;      // megatron [N, d]: partial sums
  float* gathered = nullptr;  // megatron SP [N, d]: a gathered gradient
  float* grid = nullptr;      // grid: tp2d_linear.h's scratch
  float* kv = nullptr;        // megatron: a replicated kv head's gradient
  float* leaves = nullptr;    // canonical [pieces, N, d]: per-piece partial sums (more than one piece)
  float* shards = nullptr;    // canonical [shards, d]: the norms' per-shard weight gradients (more than one)
  float* wpieces =
      nullptr;  // canonical cp [pieces, largest weight]: per-piece weight gradients (more than one)
  float* pieces2d = nullptr;  // canonical 2-D: canonical_tp_grid.h's scratch
};

// Gradients of replicated weights that each rank computes from its own
// tokens (SP): Partial over tp. They collect in scratch [n] (zeroed here) and
// are summed over tp once (by SumOrder::tree in the canonical mode), then
// added to their gradients; without SP they accumulate in place and finish
// does nothing.
class PartialGrads {
 public:
  PartialGrads(Group* over, float* scratch, int64_t n, SumOrder order = SumOrder::library);
  // Where the part at `at` of the scratch accumulates: there, or `grad` itself.
  float* into(float* grad, int64_t at) const { return over_ ? scratch_ + at : grad; }
  // Σ_tp of the scratch (one all-reduce, "<site>: <what> backward [shape]"),
  // then each (gradient, count) of `grads`, in scratch order, += its part.
  void finish(std::initializer_list<std::pair<float*, int64_t>> grads, std::string_view site,
              std::string_view what, std::initializer_list<int64_t> shape) const;

 private:
  Group* over_;
  float* scratch_;
  int64_t n_;
  SumOrder order_;
};

class LinearPlan {
 public:
  LinearPlan() = default;
  // ConfigError naming the site when a row of `table` names a weight no site
  // of `sites` has, when a site's weight has no row, or when the row's role
  // is not the one the site is written for. model_width: d.
  LinearPlan(const std::vector<PlanRow>& table, const std::vector<ModelSite>& sites, const TpGroups& groups,
             int64_t model_width);
  void bind(const LinearScratch& s) { scratch_ = s; }

  const LinearEntry& entry(size_t i) const { return entries_[i]; }  // the i-th site of the model's list
  const LinearEntry& entry(std::string_view site) const;            // by name; ConfigError when none
  const NormEntry& norms() const { return norms_; }
  int64_t cp_pieces() const {
    return cp_pieces_;
  }  // the canonical mode's cp pieces here (cp_pieces.h); 0: off
  Form form() const { return form_; }
  bool on() const { return form_ != Form::local; }
  // The residual stream here: rows of N tokens (SP: N / tp) and row width (grid: d / tp).
  int64_t rows(int64_t N) const;
  int64_t width() const { return norms_.width; }
  // The group whose ranks hold different tokens of one microbatch (SP: tp), null otherwise.
  Group* token_shards() const { return norms_.partial; }
  // Each entry's plan as text lines, for --explain.
  std::string explain() const;
  // Where this rank's columns of an activation sit in the global tensor
  // (--fingerprint, parallel/probe.h; linear_plan_coords.cpp): of entry e's
  // output (out) or input, the residual stream's when e is null. Every
  // column of the local buffer is in one span; a kv head replicated over tp
  // has the same global span on each replica (forward), a partial one
  // (grad: its gradient before the replicas' sum). The output of a fused
  // site has one span per block.
  std::vector<ColumnSpan> columns(const LinearEntry* e, bool out, bool grad) const;

  // out = inp · wᵀ through the entry's collectives; saved: its gathered input
  // where it gathers (gemm_input), resid: added to out (same shape).
  void forward(float* out, float* saved, const float* inp, const float* w, int64_t N, const LinearEntry& e,
               std::string_view label, const float* resid = nullptr) const;
  // What the forward saves of its input without computing it (recomputation).
  void keep_input(float* saved, const float* inp, int64_t N, const LinearEntry& e,
                  std::string_view label) const;
  const float* gemm_input(const float* inp, const float* saved, const LinearEntry& e) const {
    return e.gathers() ? saved : inp;
  }
  // dinp (null: skipped), dw += (null: skipped) from dout; gemm_in as gemm_input.
  void backward(float* dinp, float* dw, const float* dout, const float* gemm_in, const float* w, int64_t N,
                const LinearEntry& e, std::string_view label, std::string_view kv_label = {}) const;

  // RMSNorm of `rows` residual rows (rstd [rows]); label: the norms' site.
  void norm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t rows, float eps,
                    std::string_view label) const;
  void norm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                     const float* rstd, int64_t rows, std::string_view label) const;
  // The canonical mode's norm backward (NormEntry::shards).
  void norm_backward_shards(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                            const float* rstd, int64_t rows, std::string_view label) const;
  PartialGrads partial_grads(float* scratch, int64_t n) const {
    return {norms_.partial, scratch, n, norms_.shards > 0 ? SumOrder::tree : SumOrder::library};
  }

  // The embedding (linear_plan_ends.cpp): out [rows(N), width()] from ids [N].
  void embed_forward(float* out, const int32_t* ids, const float* table, int64_t N, int64_t V,
                     const LinearEntry& e) const;
  void embed_backward(float* dtable, const float* dout, const int32_t* ids, int64_t N, int64_t V,
                      const LinearEntry& e) const;
  // The head's logits [N, Vl] (saved: its gathered input) and their backward;
  // the cross-entropy over the vocabulary's split.
  void head_forward(float* logits, float* saved, const float* inp, const float* w, int64_t N,
                    const LinearEntry& e) const;
  void head_backward(float* dinp, float* dw, const float* dlogits, const float* gemm_in, const float* w,
                     int64_t N, const LinearEntry& e) const;
  void loss_forward(float* losses, float* lse, const float* logits, const int32_t* targets, int64_t N,
                    int64_t V, int32_t ignore_index, const LinearEntry& e) const;
  void loss_backward(float* dlogits, const float* logits, const float* lse, const int32_t* targets,
                     float dloss, int64_t N, int64_t V, int32_t ignore_index, const LinearEntry& e) const;

 private:
  LinearEntry make_entry(const ModelSite& s, const std::vector<Role>& roles, const TpGroups& g) const;
  // A column layer's GEMM input: inp, or (SP) gathered into saved (keep_input).
  const float* gathered_input(float* saved, const float* inp, int64_t N, const LinearEntry& e,
                              std::string_view label) const;
  Pieces pieces(const LinearEntry& e, std::string_view label) const {
    return {e.pieces,
            e.tp,
            label,
            scratch_.leaves,
            e.sp == SequenceParallel::on,
            scratch_.part,
            e.overlap == Overlap::on};
  }

  // dw += its cp pieces' tree (cp_pieces.h) when this rank has more than one.
  bool weight_grad_by_pieces(float* dw, const float* dout, const float* gemm_in, int64_t N,
                             const LinearEntry& e) const;
  Pieces2d pieces2d(const LinearEntry& e, std::string_view label) const;

  std::vector<LinearEntry> entries_;
  NormEntry norms_;
  int64_t cp_pieces_ = 0;
  Form form_ = Form::local;
  LinearScratch scratch_;
};

// The model sites' check against a plan table alone (LinearPlan's first
// step): ConfigError naming the site and the weight.
void check_plan_sites(const std::vector<PlanRow>& table, const std::vector<ModelSite>& sites);

}  // namespace mt::tp

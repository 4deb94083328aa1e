#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "core/trace_spans.h"
#include "model/llama_internal.h"
#include "parallel/canonical_tp_kv.h"
#include "parallel/context_parallel.h"
#include "parallel/cp_canonical.h"
#include "parallel/local_store.h"
#include "parallel/tp_comm.h"
#include "parallel/tp_plan.h"

namespace mt {

const char* kernel_name(Kernel k) {
  static const char* names[] = {"gemm",   "attention", "rmsnorm",       "rope",
                                "swiglu", "embedding", "cross_entropy", "other"};
  return names[static_cast<int>(k)];
}

Llama::Llama(const ModelConfig& cfg, const ModelOptions& opts, std::unique_ptr<ParamStore> store)
    : cfg_(cfg),
      opts_(opts),
      cp_attention_(cp_group(), opts.cp_impl, opts.canonical_cp, opts.mesh.cp_a2a, opts.mesh.cp_ring),
      tpr_{tp_group() ? tp_group()->size() : 1, tp_group() ? tp_group()->rank() : 0},
      td_(tp_dims(cfg, tpr_, tp_group() ? opts.grid : tp::Grid{})),
      table_(make_param_table(cfg, tpr_, opts.stage,
                              opts.mesh.ep == nullptr
                                  ? EpRank{}
                                  : EpRank{opts.mesh.ep->size(), opts.mesh.ep->rank(),
                                           opts.mesh.cp != nullptr ? opts.mesh.cp->size() : 1},
                              tp_group() ? opts.grid : tp::Grid{})),
      units_(make_units(table_, cfg)),
      rope_scaling_(cfg.rope()),
      rope_(cfg.rope_table(rope_scaling_, cfg.max_seq_len)),
      store_(store ? std::move(store) : std::make_unique<LocalStore>(units_)),
      buf_(std::make_unique<Buffers>()),
      dispatch_(opts.mesh.ep, cfg.n_experts) {
  cfg_.validate();
  set_state_layouts(table_, store_->sharding());
  if (!tp_group()) opts_.sp = false;
  n_stage_layers_ = static_cast<int64_t>(table_.layers.size());
  for (int64_t i = 0; i < n_stage_layers_; ++i) {
    const LayerParamOffsets& o = table_.layers[static_cast<size_t>(i)];
    const int64_t b = units_[static_cast<size_t>(layer_unit(i))].begin;
    auto rel = [b](int64_t off) { return off < 0 ? off : off - b; };
    rel_.push_back({rel(o.ln1), rel(o.qkv), rel(o.o), rel(o.ln2), rel(o.gate_up), rel(o.down), rel(o.router),
                    rel(o.experts)});
  }
  if (has_head()) {
    norm_rel_ = table_.norm - units_[static_cast<size_t>(table_.final_unit)].begin;
    head_unit_ = head_in_embed_unit() ? table_.embed_unit : table_.final_unit;
    head_rel_ = table_.lm_head - units_[static_cast<size_t>(head_unit_)].begin;
  }
  if (opts_.max_seq == 0) opts_.max_seq = cfg_.max_seq_len;
  MT_REQUIRE(opts_.max_seq <= cfg_.max_seq_len, ConfigError, "seq_len (", opts_.max_seq,
             ") must not exceed model.max_seq_len (", cfg_.max_seq_len, ")");
  MT_REQUIRE(opts_.max_batch >= 1, ConfigError, "microbatch size (", opts_.max_batch, ") must be at least 1");
  if (sp_on()) {  // max_seq is this cp rank's share of each sequence
    const int64_t cp = cp_group() ? cp_group()->size() : 1;
    tp::check_sequence_parallel(opts_.max_seq * cp, cp, tpr_.size);
  }
  kv_slots_ = opts_.canonical_tp > cfg_.n_kv_heads && !(tp_group() && tp::on_grid(opts_.grid));
  kv_att_ = kv_slots_ ? tp::attention_kv_heads(td_.kv_heads, opts_.canonical_tp, cfg_.n_kv_heads, tpr_.size)
                      : td_.kv_heads;
  Group* kv = nullptr;  // the ranks sharing this rank's kv head (tp > n_kv_heads)
  if (td_.kv_replicas > 1) {
    MT_REQUIRE(opts_.mesh.tp_kv != nullptr && opts_.mesh.tp_kv->size() == td_.kv_replicas, ConfigError,
               "tp (", tpr_.size, ") > n_kv_heads (", cfg_.n_kv_heads, ") needs the kv-replica group of ",
               td_.kv_replicas, " ranks (ModelOptions::mesh.tp_kv, the mesh's tp_kv sub-axis)");
    kv = opts_.mesh.tp_kv;
  }
  make_plan(kv);
  std::vector<bool> moe_layers;
  for (const LayerParamOffsets& o : rel_)
    moe_layers.push_back(o.moe());
  buf_->plan = buffers::chunk_plan(cfg_, td_,
                                   {.B = opts_.max_batch,
                                    .T = opts_.max_seq,
                                    .tp = tpr_.size,
                                    .sp = sp_on(),
                                    .grid = tp_group() ? opts_.grid : tp::Grid{},
                                    .ep = dispatch_.max_local_rows(1),
                                    .recompute = opts_.recompute,
                                    .embed = has_embed(),
                                    .head = has_head(),
                                    .moe_layers = std::move(moe_layers),
                                    .pieces = opts_.canonical_tp > 1 ? opts_.canonical_tp / tpr_.size : 0,
                                    .kv_slots = kv_slots_ ? kv_att_ : 0,
                                    .cp_pieces = plan_.cp_pieces(),
                                    .split_backward = opts_.split_backward,
                                    .canonical_c = opts_.canonical_tp,
                                    .canonical_d = opts_.canonical_tp_d});
  if (plan_.form() == tp::Form::grid) check_grid();
  Buffers& b = *buf_;  // sized by the buffer plan (model/buffer_plan.h)
  if (opts_.recompute.any()) b.recompute.emplace_back(b.plan.recompute);
  b.allocate(b.plan.shared);
  if (plan_.form() == tp::Form::grid)
    plan_.bind({nullptr, nullptr, b.grid.data(), nullptr, nullptr, nullptr, nullptr, b.pieces2d.data()});
  else
    plan_.bind({b.part.data(), b.dfull.data(), nullptr, b.kvg.data(), b.leaves.data(), b.nshards.data(),
                b.cpwg.data(), b.pieces2d.data()});
  moe_init();
  slot(0);  // one microbatch's activations, allocated up front
}

void Llama::begin_step(int64_t microbatches) {
  microbatches_ = microbatches;
  microbatch_ = 0;
  const size_t L = moe_stats_.layers.size();
  moe_stats_.tokens_per_expert.assign(L, std::vector<int64_t>(static_cast<size_t>(cfg_.n_experts), 0));
  moe_stats_.dropped = 0;
  moe_stats_.aux_loss = moe_stats_.z_loss = 0;
  moe_stats_.min_topk_margin = std::numeric_limits<double>::infinity();
  moe_stats_.microbatches = 0;
  store_->begin_step(microbatches);
}

Llama::Slot& Llama::slot(int i) {
  MT_CHECK(i >= 0, "activation slot ", i, " is negative");
  while (static_cast<int>(slots_.size()) <= i) {
    slots_.push_back(std::make_unique<Slot>(buf_->plan));
  }
  return *slots_[static_cast<size_t>(i)];
}

Llama::~Llama() = default;

void Llama::init(uint64_t seed) {
  store_->init_params([&](const ParamSlot& p, int64_t first, int64_t n, float* out) {
    init_param_slice(table_.find(p.name), cfg_, seed, first, n, out);
  });
}

Llama::LayerActs& Llama::acts_for(int64_t i) {
  return opts_.recompute.full() ? buf_->recompute[0] : cur_->layers[static_cast<size_t>(i)];
}

void Llama::lend_recomputed(LayerActs& a) {
  if (!opts_.recompute.selective()) return;
  LayerActs& shared = buf_->recompute[0];
  for (const buffers::Entry& e : buf_->plan.recompute)
    std::swap(a.member(e.name), shared.member(e.name));
}

float* Llama::norm_scratch() {
  return has_head() ? cur_->lnf.data() : buf_->norm_out.data();
}

float* Llama::column_dinput_buffer() {
  if (!plan_.on()) return buf_->dmid.data();
  const bool reduced_elsewhere = plan_.token_shards() != nullptr || plan_.form() == tp::Form::grid;
  return reduced_elsewhere ? buf_->dln.data() : buf_->part.data();
}

double Llama::forward(const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) {
  return forward_slot(0, inputs, targets, B, T);
}

void Llama::backward(float dloss) {
  backward_slot(0, dloss);
}

float* Llama::stage_input(int s) {
  MT_CHECK(!has_embed(), "the first stage reads token ids, not an input activation");
  return slot(s).resid[0].data();
}

const float* Llama::stage_output(int s) {
  MT_CHECK(!has_head(), "the last stage ends in the loss, not an output activation");
  return slot(s).resid.back().data();
}

float* Llama::output_grad() {
  MT_CHECK(!has_head(), "the last stage starts its backward from the loss");
  return buf_->dres.data();
}

const float* Llama::input_grad() const {
  MT_CHECK(!has_embed(), "the first stage ends its backward in the embedding");
  return buf_->dres.data();
}

void Llama::use_slot(int s) {
  cur_ = &slot(s);
  B_ = cur_->B;
  T_ = cur_->T;
  N_ = cur_->N;
  Nl_ = cur_->Nl;
}

double Llama::forward_slot(int s, const int32_t* inputs, const int32_t* targets, int64_t B, int64_t T) {
  MT_REQUIRE(B >= 1 && B <= opts_.max_batch, ConfigError, "microbatch of ", B,
             " sequences exceeds the model's buffers (", opts_.max_batch, ")");
  MT_REQUIRE(T >= 1 && T <= opts_.max_seq, ConfigError, "sequence length ", T,
             " exceeds the model's buffers (", opts_.max_seq, ")");
  Slot& sl = slot(s);
  sl.B = B;
  sl.T = T;
  sl.N = B * T;
  sl.Nl = plan_.rows(sl.N);
  use_slot(s);
  if (cfg_.moe()) sl.tally.reset(cfg_.top_k, cfg_.n_experts);
  const int64_t N = N_;
  if (has_embed()) sl.inputs.assign(inputs, inputs + N);
  sl.has_targets = has_head() && targets != nullptr;
  if (sl.has_targets) sl.targets.assign(targets, targets + N);
  sl.pos.resize(static_cast<size_t>(N));
  if (opts_.canonical_cp > 1) {  // this rank's pieces of each sequence, in piece order (cp_canonical.h)
    const int P = cp_group() ? cp_group()->size() : 1, r = cp_group() ? cp_group()->rank() : 0;
    for (int64_t b = 0; b < B; ++b)
      cp::piece_positions(sl.pos.data() + b * T, T * P, static_cast<int>(opts_.canonical_cp), P, r);
  } else if (cp_group()) {  // this rank's zigzag share of each sequence of T·cp tokens: global positions
    for (int64_t b = 0; b < B; ++b)
      cp::zigzag_positions(sl.pos.data() + b * T, T * cp_group()->size(), cp_group()->size(),
                           cp_group()->rank());
  } else {
    for (int64_t i = 0; i < N; ++i)
      sl.pos[static_cast<size_t>(i)] = static_cast<int32_t>(i % T);
  }
  dropout_coords(sl);
  upload_slot(sl);
  if (rope_scaling_.type == RopeType::dynamic) {  // frequencies of this length (docs/MODEL.md)
    const int64_t L = T * (cp_group() ? cp_group()->size() : 1);
    if (rope_.seq_len() != L) rope_ = cfg_.rope_table(rope_scaling_, L);
  }
  if (has_embed()) embed_forward(sl);
  for (int64_t i = 0; i < n_stage_layers_; ++i) {
    const int unit = layer_unit(i);
    const float* P = store_->acquire_params(unit, Pass::forward);
    LayerActs& a = acts_for(i);
    lend_recomputed(a);
    layer_forward(i, P, a, sl.resid[static_cast<size_t>(i)].data(),
                  sl.resid[static_cast<size_t>(i + 1)].data());
    lend_recomputed(a);
    probe(table_.stage.first_layer + i, "out", false, sl.resid[static_cast<size_t>(i + 1)].data(),
          ProbeRows::resid);
    store_->release_params(unit, Pass::forward);
  }
  if (cfg_.moe()) moe_tally_forward(sl);
  return has_head() ? head_forward(sl) : 0.0;
}

const float* Llama::logits() const {
  MT_CHECK(tp_group() == nullptr,
           "logits() needs the whole vocabulary: not available under tensor parallelism");
  MT_CHECK(has_head(), "logits() needs the stage with the LM head");
  return slots_[0]->logits.data();
}

void Llama::layers_backward(Slot& sl) {
  for (int64_t i = n_stage_layers_ - 1; i >= 0; --i) {
    const int unit = layer_unit(i);
    const float* x_in = sl.resid[static_cast<size_t>(i)].data();
    const TraceScope span("layer", "backward L", table_.stage.first_layer + i);  // --trace
    const float* P = store_->acquire_params(unit, Pass::backward);
    float* G = store_->acquire_grads(unit);
    LayerActs& a = acts_for(i);
    // Recomputation: the same kernels (and, on a grid, collectives) on the same
    // input, so the recomputed activations are bitwise the ones the forward produced.
    lend_recomputed(a);
    recomputing_ = opts_.recompute.any();
    if (opts_.recompute.full()) layer_forward(i, P, a, x_in, nullptr);
    if (opts_.recompute.selective()) layer_recompute(i, P, a, x_in);
    recomputing_ = false;
    layer_backward(i, P, G, a, x_in, buf_->dres.data());
    lend_recomputed(a);
    store_->release_grads(unit);
    store_->release_params(unit, Pass::backward);
  }
}

void Llama::backward_slot(int s, float dloss) {
  use_slot(s);
  Slot& sl = *cur_;
  // A tied head's gradient goes to the embedding unit, acquired until its backward is done.
  float* Eg = nullptr;
  if (has_head()) Eg = head_backward(dloss);
  if (cfg_.moe()) moe_tally_backward(sl);
  // Otherwise dres holds the gradient of this stage's output (output_grad()).
  layers_backward(sl);
  if (has_embed()) embed_backward(sl, Eg);
  moe_after_backward(sl);
  sl.has_targets = false;
}

// The slot's token ids, targets, positions and dropout coordinates, onto the
// run's device (docs/ARCHITECTURE.md "The kernel seam": the crossings in).
void Llama::upload_slot(Slot& sl) const {
  if (has_embed()) sl.d_inputs.mirror(sl.inputs, "tokens", MemKind::activation);
  if (sl.has_targets) sl.d_targets.mirror(sl.targets, "tokens", MemKind::activation);
  sl.d_pos.mirror(sl.pos, "positions", MemKind::activation);
  if (!drop_.on || (cfg_.attention_dropout == 0 && cfg_.hidden_dropout == 0)) return;  // dropout's only
  sl.d_seq_rows.mirror(sl.seq_rows, "positions", MemKind::activation);
  sl.d_seq_resid.mirror(sl.seq_resid, "positions", MemKind::activation);
  sl.d_pos_resid.mirror(sl.pos_resid, "positions", MemKind::activation);
}

void Llama::embed_forward(Slot& sl) {
  const int eu = table_.embed_unit;
  const float* E = store_->acquire_params(eu, Pass::forward);
  {
    MT_TIMED(Kernel::embedding);
    plan_.embed_forward(sl.resid[0].data(), sl.d_inputs.data(),
                        E + (table_.embed - units_[static_cast<size_t>(eu)].begin), N_, cfg_.vocab_size,
                        plan_.entry(kEmbed));
  }
  probe(-1, "embed", false, sl.resid[0].data(), ProbeRows::resid);
  store_->release_params(eu, Pass::forward);
}

// Eg: the embedding unit's gradient when the tied head's backward holds it, else null.
void Llama::embed_backward(Slot& sl, float* Eg) {
  const int eu = table_.embed_unit;
  if (Eg == nullptr) Eg = store_->acquire_grads(eu);
  {
    MT_TIMED(Kernel::embedding);
    plan_.embed_backward(Eg + (table_.embed - units_[static_cast<size_t>(eu)].begin), buf_->dres.data(),
                         sl.d_inputs.data(), N_, cfg_.vocab_size, plan_.entry(kEmbed));
  }
  store_->release_grads(eu);
}

// ---- On a grid of the tp ranks (R > 1): the buffers and slots ----

void Llama::check_grid() const {
  // The start-up rules of a grid, Config::validate's: a stage without both
  // ends is one of several pipeline stages.
  tp::check_grid(opts_.grid,
                 {sp_on(), cp_group() != nullptr ? cp_group()->size() : 1, has_embed() && has_head() ? 1 : 2,
                  cfg_.moe(), cfg_.attention_dropout > 0 || cfg_.hidden_dropout > 0, cfg_.n_kv_heads,
                  cfg_.n_heads, cfg_.ffn_hidden, opts_.tp_overlap});
}

}  // namespace mt

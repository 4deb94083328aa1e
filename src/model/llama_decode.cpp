// Generation's way through the model (infer/decoder.h drives it): the same
// embedding, decoder blocks and head as training, over the rows of one decode
// step, with the attention strategy generation passes in (the KV cache's,
// infer/kv_attention.h) in place of the training attention. The kernels, their
// shapes and their order are those of the training forward on the step's rows.
#include <algorithm>

#include "core/error.h"
#include "model/buffer_plan.h"
#include "model/llama_internal.h"
#include "parallel/linear_plan.h"

namespace mt {

void Llama::check_generation() const {
  MT_REQUIRE(plan_.form() != tp::Form::grid, ConfigError,
             "generation does not run 2-D tensor parallelism (a ", opts_.grid.rows, " × ", opts_.grid.cols,
             " tp grid): generate on 1-D tp over the same ", tpr_.size, " ranks");
  MT_REQUIRE(!dispatch_.distributed(), ConfigError, "generation does not run expert parallelism (ep = ",
             opts_.mesh.ep != nullptr ? opts_.mesh.ep->size() : 1,
             "): its replicas decode different prompts, so every rank holds every expert (ep = 1)");
  MT_REQUIRE(!sp_on(), ConfigError,
             "generation does not run sequence parallelism: a decode step's rows (one per sequence) are not "
             "split over tp");
  MT_REQUIRE(!drop_.on, ConfigError, "generation runs without dropout: call clear_dropout() first");
}

Llama::DecodeState& Llama::decode_state(int64_t rows) {
  check_generation();
  if (!decode_) decode_ = std::make_unique<DecodeState>();
  DecodeState& d = *decode_;
  const int64_t n = std::max<int64_t>(rows, 1), C = cfg_.d_model;
  if (n <= d.rows) return d;
  const MemKind k = MemKind::activation;
  d.rows = n;
  std::vector<bool> moe_layers;
  for (const LayerParamOffsets& o : rel_)
    moe_layers.push_back(o.moe());
  // One set of layer activations for the step's rows: the buffer plan's
  // recomputation set (every layer kind of the stage), one sequence of n rows.
  const buffers::ChunkPlan rows_plan = buffers::chunk_plan(cfg_, td_,
                                                           {.B = 1,
                                                            .T = n,
                                                            .tp = tpr_.size,
                                                            .grid = tp_group() ? opts_.grid : tp::Grid{},
                                                            .ep = dispatch_.max_local_rows(1),
                                                            .recompute = Recompute::full_layer(),
                                                            .embed = has_embed(),
                                                            .head = has_head(),
                                                            .moe_layers = std::move(moe_layers)});
  d.acts = LayerActs(rows_plan.recompute);
  d.out = Tensor({n, C}, k);
  if (has_head()) {
    d.lnf = Tensor({n, C}, k);
    d.rstdf = Tensor({n}, k);
  }
  Buffers& b = *buf_;  // the scratch the layers share with training, grown to the step
  if (tp_group() && b.part.numel() < n * C) b.part = Tensor({n, C}, k);
  if (has_moe_layer()) {
    const int64_t E = cfg_.n_experts, Rl = dispatch_.max_local_rows(n * cfg_.top_k);
    if (b.rlogits.numel() < n * E) b.rlogits = Tensor({n, E}, k);
    if (b.dxs.numel() < Rl * C) b.dxs = Tensor({Rl, C}, k);
  }
  plan_.bind({b.part.data(), b.dfull.data(), nullptr, b.kvg.data(), b.leaves.data(), b.nshards.data(),
              b.cpwg.data()});  // part may have grown
  return d;
}

void Llama::embed_rows(float* out, const int32_t* ids, const float* table, int64_t N) {
  MT_TIMED(Kernel::embedding);
  plan_.embed_forward(out, ids, table, N, cfg_.vocab_size, plan_.entry(kEmbed));
}

void Llama::decode_embed(float* x, const int32_t* ids, int64_t rows) {
  MT_CHECK(has_embed(), "decode_embed runs on the stage with the embedding");
  decode_state(rows);
  const int eu = table_.embed_unit;
  const float* E = store_->acquire_params(eu, Pass::forward);
  embed_rows(x, ids, E + (table_.embed - units_[static_cast<size_t>(eu)].begin), rows);
  store_->release_params(eu, Pass::forward);
}

void Llama::decode_layers(float* x, const int32_t* pos, int64_t rows, AttentionStrategy& attention) {
  DecodeState& d = decode_state(rows);
  Slot& sl = d.slot;
  sl.B = 1;
  sl.T = sl.N = sl.Nl = rows;
  sl.pos.assign(pos, pos + rows);
  sl.d_pos.mirror(sl.pos, "positions", MemKind::activation);
  if (cfg_.moe()) sl.tally.reset(cfg_.top_k, cfg_.n_experts);
  cur_ = &sl;  // the next training forward or backward sets its own (use_slot)
  B_ = 1;
  T_ = N_ = Nl_ = rows;
  struct Restore {  // the training attention back, however the step ends
    AttentionStrategy*& at;
    AttentionStrategy* was;
    ~Restore() { at = was; }
  } restore{attention_, attention_};
  attention_ = &attention;
  float *in = x, *out = d.out.data();
  for (int64_t i = 0; i < n_stage_layers_; ++i) {
    const int unit = layer_unit(i);
    const float* P = store_->acquire_params(unit, Pass::forward);
    layer_forward(i, P, d.acts, in, out);
    store_->release_params(unit, Pass::forward);
    std::swap(in, out);
  }
  if (in != x) copy_bytes(x, in, rows * cfg_.d_model * int64_t{sizeof(float)});
}

void Llama::decode_head(float* logits, const float* x, int64_t rows) {
  MT_CHECK(has_head(), "decode_head runs on the stage with the LM head");
  DecodeState& d = decode_state(rows);
  const int fu = table_.final_unit;
  const float* Fp = store_->acquire_params(fu, Pass::forward);
  const float* head = head_unit_ == fu ? Fp : store_->acquire_params(head_unit_, Pass::forward);
  {
    MT_TIMED(Kernel::rmsnorm);
    plan_.norm_forward(d.lnf.data(), d.rstdf.data(), x, Fp + norm_rel_, rows,
                       static_cast<float>(cfg_.norm_eps), final_norm_site());
  }
  {
    MT_TIMED(Kernel::gemm);
    plan_.head_forward(logits, nullptr, d.lnf.data(), head + head_rel_, rows, plan_.entry(kHead));
  }
  if (head_unit_ != fu) store_->release_params(head_unit_, Pass::forward);
  store_->release_params(fu, Pass::forward);
}

}  // namespace mt

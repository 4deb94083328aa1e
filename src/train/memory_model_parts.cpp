#include "train/memory_model_parts.h"

#include <algorithm>

#include "ckpt/checkpoint_slices.h"
#include "parallel/tp2d.h"
#include "pipeline/executor.h"
#include "pipeline/schedule.h"
#include "train/run_mesh.h"

namespace mt::memory_model {

namespace {

// The sizes every buffer of a chunk is made of (model/llama.cpp's constructor).
struct Dims {
  int64_t B, T, N, Nl, C, D, F, Q, QKV, heads;
  int64_t E, k, I, ep;  // mixture of experts; ep: the expert-parallel group's size (1 without)
  bool sp;
};

Dims dims_of(const Config& cfg, const TpDims& td) {
  const ModelConfig& m = cfg.model;
  const ParallelConfig& p = cfg.parallel;
  Dims d{};
  d.sp = p.sp && p.tp > 1;
  d.B = cfg.train.microbatch_size;
  d.T = cfg.train.seq_len / p.cp;  // this rank's tokens of each sequence
  d.N = d.B * d.T;
  d.Nl = d.sp ? d.N / p.tp : d.N;
  d.C = m.d_model;
  d.D = m.head_dim();
  d.F = td.ffn;
  d.heads = td.heads;
  d.Q = td.heads * d.D;
  d.QKV = d.Q + 2 * td.kv_heads * d.D;
  d.E = m.n_experts;
  d.k = m.top_k;
  d.I = m.expert_hidden();
  d.ep = std::max<int64_t>(1, p.ep);
  return d;
}

// model/llama_internal.h MoeActs: N tokens, their R = N·k choices, and the up
// to R·ep rows this rank's experts may receive.
int64_t moe_acts(const Dims& d) {
  const int64_t R = d.N * d.k, Rl = R * d.ep;
  return d.N * d.E + d.N + d.N * d.k + R * d.C + (d.ep > 1 ? Rl * d.C : 0) + Rl * 3 * d.I + R * d.C;
}

// model/llama_internal.h LayerActs.
int64_t layer_acts(const Dims& d, bool dense, bool moe) {
  int64_t f =
      d.N * d.C + d.Nl + d.N * d.QKV + d.N * d.Q + d.B * d.heads * d.T + d.Nl * d.C + d.N * d.C + d.Nl;
  if (d.sp && moe) f += d.Nl * d.C;
  if (dense) f += d.N * 3 * d.F;
  if (moe) f += moe_acts(d);
  return f;
}

// The backward's buffers every chunk has (Llama::Buffers): norm_out (SP, no
// head), dres (with the router statistics X), dtmp, dmid, dqkv, dgu.
int64_t shared_buffers(const Dims& d, bool head, int64_t X) {
  const int64_t norm_out = d.sp && !head ? d.Nl * d.C : 0;
  return norm_out + 2 * d.Nl * d.C + X + d.N * std::max({d.C, d.F, d.Q}) + d.N * d.QKV + d.N * 2 * d.F;
}

// The same on an R × C grid with R > 1 (model/llama_tp2d_ends.cpp: init_tp2d,
// layer_acts_2d, make_slot_2d): the residual stream d/(RC) wide, inputs
// gathered over one sub-axis d/R (or Q/C, F/C) wide; one stage, dense layers.
int64_t grid_activation_floats(const Config& cfg, const TpDims& td, const tp2d::Grid& g, int64_t slots) {
  const Dims d = dims_of(cfg, td);
  const int64_t R = g.rows, dl = d.C / (R * g.cols), dR = d.C / R, Ql = d.Q, QKVl = d.QKV, Fl = d.F;
  const int64_t QC = Ql * R, QKVC = QKVl * R, FC = Fl * R, N = d.N, L = cfg.model.n_layers;
  const int64_t acts = 3 * N * dl + 2 * N * dR + 2 * N + N * QKVl + N * Ql + d.B * d.heads * d.T + N * QC +
                       3 * N * Fl + N * FC;
  int64_t f = 3 * N * dl + N * std::max(Fl, Ql) + N * QKVl + 2 * N * Fl +
              3 * N * std::max({dR, QKVC, 2 * FC, QC, FC});  // dres, dtmp, dln, dmid, dqkv, dgu, grid
  if (cfg.train.recompute) f += acts;
  const int64_t slot = (L + 1) * N * dl + (cfg.train.recompute ? 0 : L * acts) + N * dl + 2 * N + N * dR +
                       N * td.vocab_rows + N;  // resid, layers, lnf, rstdf, lnf_full, logits, losses, lse_ce
  return f + slots * slot;
}

}  // namespace

int64_t chunk_activation_floats(const Config& cfg, const TpDims& td, const StageRange& stage, int64_t slots,
                                int64_t* scratch) {
  const ModelConfig& m = cfg.model;
  const tp2d::Grid& grid = cfg.parsed().tp_grid;
  *scratch = 0;
  if (grid.two_d()) return grid_activation_floats(cfg, td, grid, slots);
  const Dims d = dims_of(cfg, td);
  const int64_t end = stage.end_layer < 0 ? m.n_layers : stage.end_layer;
  bool any_moe = false, any_dense = false;
  for (int64_t l = stage.first_layer; l < end; ++l)
    (m.is_moe_layer(l) ? any_moe : any_dense) = true;
  // The router statistics riding with the residual stream between stages.
  const int64_t X = m.moe() && !(stage.embed && stage.head) ? (d.k * d.E + 2 * d.E + 3) : 0;
  *scratch = 0;
  int64_t f = shared_buffers(d, stage.head, X);
  if (cfg.train.recompute) f += layer_acts(d, any_dense, any_moe);
  if (cfg.parallel.tp > 1) {
    f += d.N * d.C;                           // part
    *scratch += 2 * td.kv_heads * d.D * d.C;  // kvg
  }
  if (d.sp) {
    f += d.N * d.C + d.Nl * d.C;  // dfull, dln
    *scratch += 2 * d.C;          // normg
  }
  if (any_moe) {  // Llama::moe_init, over the full N tokens
    const int64_t Rl = d.N * d.k * d.ep;
    f += 2 * d.N * d.E + d.N * d.k + d.N * d.k * d.C + 2 * Rl * d.C + Rl * 3 * d.I;
    if (d.ep > 1) f += Rl * d.C;                                     // xfer
    if (d.sp) *scratch += d.E * d.C + (d.E / d.ep) * 3 * d.I * d.C;  // moeg
  }
  int64_t slot =
      (end - stage.first_layer + 1) * (d.Nl * d.C + X);  // resid: each layer's input and the output
  if (!cfg.train.recompute) {
    for (int64_t l = stage.first_layer; l < end; ++l)
      slot += layer_acts(d, !m.is_moe_layer(l), m.is_moe_layer(l));
  }
  if (stage.head) {  // lnf, rstdf, lnf_full, logits, losses, lse_ce
    slot += d.Nl * d.C + d.Nl + (d.sp ? d.N * d.C : 0) + d.N * td.vocab_rows + 2 * d.N;
  }
  return f + slots * slot;
}

int microbatches_of(const Config& cfg) {
  const int64_t per_step = std::max<int64_t>(1, cfg.parallel.dp * cfg.train.microbatch_size);
  return static_cast<int>(std::max<int64_t>(1, cfg.train.batch_size / per_step));
}

pp::Schedule schedule_of(const Config& cfg) {
  const ParallelConfig& p = cfg.parallel;
  const int v = static_cast<int>(p.virtual_stages);
  const int microbatches = microbatches_of(cfg);
  return p.pp * v > 1 ? pp::make_schedule(cfg.parsed().schedule, static_cast<int>(p.pp), v, microbatches)
                      : pp::one_stage_schedule(microbatches);
}

std::vector<int64_t> slots_per_chunk(const Config& cfg, const pp::Schedule& s, int64_t pp_rank) {
  const int v = static_cast<int>(cfg.parallel.virtual_stages);
  const int microbatches = microbatches_of(cfg);
  std::vector<int64_t> made(static_cast<size_t>(v), 1);  // slot 0 exists from the start
  std::vector<std::vector<int64_t>> free(static_cast<size_t>(v), std::vector<int64_t>{0});
  std::vector<std::vector<int64_t>> slot_of(static_cast<size_t>(v),
                                            std::vector<int64_t>(static_cast<size_t>(microbatches), -1));
  for (const pp::Action& a : s.ranks[static_cast<size_t>(pp_rank)]) {
    const size_t c = static_cast<size_t>(s.chunk_of(a.vstage));
    int64_t& slot = slot_of[c][static_cast<size_t>(a.microbatch)];
    if ((a.op == pp::Op::forward || a.op == pp::Op::recv_act) && slot < 0) {
      if (free[c].empty()) free[c].push_back(made[c]++);
      slot = free[c].back();
      free[c].pop_back();
    } else if (a.op == pp::Op::backward) {
      free[c].push_back(slot);
      slot = -1;
    }
  }
  return made;
}

int64_t cp_comm_floats(const Config& cfg, const TpDims& td, int64_t* scratch) {
  const ParallelConfig& p = cfg.parallel;
  *scratch = 0;
  if (p.cp <= 1) return 0;
  const int64_t B = cfg.train.microbatch_size, Tk = cfg.train.seq_len / p.cp;
  const int64_t kv = B * Tk * td.kv_heads * cfg.model.head_dim(), numel = 2 * kv + B * Tk;
  if (cfg.parsed().cp_impl == cp::CpImpl::allgather) {
    const int64_t P = p.cp;
    return std::max(numel + P * numel + 2 * P * kv, 6 * P * kv + 2 * kv);
  }
  *scratch = B * Tk * td.heads * cfg.model.head_dim() + B * td.heads * Tk;  // part_out, part_lse
  return 2 * numel + 6 * kv;
}

int64_t optimizer_states(const Config& cfg) {
  return cfg.parsed().optimizer != OptimizerKind::sgd ? 2 : cfg.train.momentum != 0 ? 1 : 0;
}

int64_t checkpoint_staging_floats(const Config& cfg, int64_t rank, const ParamTable& chunk) {
  if (cfg.train.checkpoint_dir.empty()) return 0;
  ParamTable table = chunk;  // copied only here: the planner estimates many layouts without checkpoints
  const ParallelConfig& p = cfg.parallel;
  const MeshSizes sizes = mesh_sizes(p);
  const MeshCoords coords = mesh_coords_of(static_cast<int>(rank), sizes);
  // The store's sharding (train/train_model.cpp make_store, DataParallelStore::sharding).
  AxisSet group = 0;  // 0: the model's own LocalStore, nothing sharded
  if (p.dp * p.cp > 1 || p.zero > 0) group = axis_bit(Axis::dp) | (p.cp > 1 ? axis_bit(Axis::cp) : 0u);
  set_state_layouts(table, {static_cast<int>(p.zero), group});
  int64_t written = 0;
  for (const ParamSpec& spec : table.specs) {
    const LocalSlice s = spec_slice(spec, sizes, coords);
    if (s.writer) written += s.numel();
  }
  return written * (1 + optimizer_states(cfg));
}

}  // namespace mt::memory_model

#include "cost/memory_model_parts.h"

#include <algorithm>

#include "config/mesh_sizes.h"
#include "model/buffer_plan.h"
#include "model/param_slice.h"
#include "optim/optimizer.h"
#include "parallel/cp_attention.h"
#include "parallel/store_sharding.h"
#include "parallel/tp2d.h"
#include "pipeline/executor.h"
#include "pipeline/schedule.h"

namespace mt::memory_model {

namespace {

// What the chunk's buffers are sized by, as the trainer builds the chunk
// (train/train_model.cpp model_options): its microbatch and this cp rank's
// share of a sequence, the tp, SP, grid and ep groups, recomputation, the
// stage's ends and layer kinds.
buffers::Shape shape_of(const Config& cfg, const StageRange& stage) {
  const ModelConfig& m = cfg.model;
  const ParallelConfig& p = cfg.parallel;
  buffers::Shape s;
  s.B = cfg.train.microbatch_size;
  s.T = cfg.train.seq_len / p.cp;
  s.tp = p.tp;
  s.sp = p.sp && p.tp > 1;
  s.grid = p.tp > 1 ? cfg.parsed().tp_grid : tp2d::Grid{};
  s.ep = std::max<int64_t>(1, p.ep);
  s.recompute = cfg.parsed().recompute;
  if (cfg.parsed().reduction == Reduction::canonical && p.canonical_tp > 1) s.pieces = p.canonical_tp / p.tp;
  if (s.pieces > 0 && p.canonical_tp > m.n_kv_heads && !tp::on_grid(s.grid))  // canonical kv slots
    s.kv_slots = s.pieces;
  if (cfg.parsed().reduction == Reduction::canonical && p.canonical_cp > 1)
    s.cp_pieces = p.canonical_cp / p.cp;
  if (cfg.parsed().reduction == Reduction::canonical && p.canonical_tp_d > 1) {
    s.canonical_c = p.canonical_tp > 1 ? p.canonical_tp : 0;
    s.canonical_d = p.canonical_tp_d;
  }
  s.embed = stage.embed;
  s.head = stage.head;
  // The trainer splits the backward only along a pipeline (train/train_model.cpp).
  s.split_backward = p.pp * p.virtual_stages > 1 && pp::split_backward(cfg.parsed().schedule);
  const int64_t end = stage.end_layer < 0 ? m.n_layers : stage.end_layer;
  for (int64_t l = stage.first_layer; l < end; ++l)
    s.moe_layers.push_back(m.is_moe_layer(l));
  return s;
}

}  // namespace

ChunkFloats chunk_floats(const Config& cfg, const TpDims& td, const StageRange& stage, int64_t slots) {
  const buffers::ChunkPlan plan = buffers::chunk_plan(cfg.model, td, shape_of(cfg, stage));
  ChunkFloats f;
  f.activation = plan.shared_floats(MemKind::activation) + slots * plan.slot_floats(MemKind::activation);
  f.scratch = plan.shared_floats(MemKind::scratch) + slots * plan.slot_floats(MemKind::scratch);
  f.residual = plan.resid.empty() ? 0 : plan.resid.front().numel();
  return f;
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
    } else if (a.op == s.grad_op()) {  // the backward, or the W of a split one: the slot is free
      free[c].push_back(slot);
      slot = -1;
    }
  }
  return made;
}

CpFloats cp_floats(const Config& cfg, const TpDims& td) {
  const int cp = static_cast<int>(std::max<int64_t>(1, cfg.parallel.cp));  // an unvalidated 0 (the planner)
  // The dims the layer hands its attention strategy (model/llama_layer.cpp):
  // this cp rank's tokens, this tp rank's heads, q|k|v fused.
  const int64_t T = cfg.train.seq_len / cp, D = cfg.model.head_dim();
  const int64_t Q = td.heads * D, QKV = Q + 2 * td.kv_heads * D;
  const AttentionDims d{cfg.train.microbatch_size, T, T, td.heads, td.kv_heads, D, QKV, QKV, Q};
  const cp::CpImpl impl = cfg.parsed().cp_impl;
  const int64_t grain = cfg.parsed().reduction == Reduction::canonical ? cfg.parallel.canonical_cp : 0;
  const int a2a = static_cast<int>(cfg.parallel.cp_ulysses);  // the hybrid's all-to-all group
  return {cp::CpAttention::peak_floats(d, impl, cp, MemKind::comm, grain, a2a),
          cp::CpAttention::peak_floats(d, impl, cp, MemKind::scratch, grain, a2a)};
}

int64_t optimizer_states(const Config& cfg) {
  return optimizer_state_count(cfg.parsed().optimizer, cfg.train.momentum);
}

int64_t checkpoint_staging_floats(const Config& cfg, int64_t rank, const ParamTable& chunk) {
  if (cfg.train.checkpoint_dir.empty()) return 0;
  ParamTable table = chunk;  // copied only here: the planner estimates many layouts without checkpoints
  const ParallelConfig& p = cfg.parallel;
  const MeshSizes sizes = mesh_sizes(p);
  const MeshCoords coords = mesh_coords_of(static_cast<int>(rank), sizes);
  set_state_layouts(table,
                    store_sharding(p.dp, p.cp, static_cast<int>(p.zero), p.dp_shard));  // the trainer's store
  int64_t written = 0;
  for (const ParamSpec& spec : table.specs) {
    const LocalSlice s = spec_slice(spec, sizes, coords);
    if (s.writer) written += s.numel();
  }
  return written * (1 + optimizer_states(cfg));
}

}  // namespace mt::memory_model

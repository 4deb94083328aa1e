#include "model/buffer_plan.h"

#include <algorithm>

#include "core/error.h"
#include "parallel/canonical_tp_grid.h"

namespace mt::buffers {

Dims::Dims(std::initializer_list<int64_t> dims) {
  MT_CHECK(dims.size() <= d_.size(), "a buffer plan entry of ", dims.size(), " dims (at most ", d_.size(),
           ")");
  for (const int64_t d : dims)
    d_[static_cast<size_t>(n_++)] = d;
}

int64_t Dims::numel() const {
  int64_t n = 1;
  for (int i = 0; i < n_; ++i)
    n *= d_[static_cast<size_t>(i)];
  return n;
}

int64_t floats(const List& list, MemKind kind) {
  int64_t f = 0;
  for (const Entry& e : list)
    f += e.kind == kind ? e.numel() : 0;
  return f;
}

GridWidths::GridWidths(const ModelConfig& c, const TpDims& d, const tp::Grid& g)
    : dl(c.d_model / (g.rows * g.cols)),
      dR(c.d_model / g.rows),
      Ql(d.heads * c.head_dim()),
      Kl(d.kv_heads * c.head_dim()),
      QKVl(Ql + 2 * Kl),
      QC(Ql * g.rows),
      KC(Kl * g.rows),
      QKVC(QKVl * g.rows),
      Fl(d.ffn),
      FC(d.ffn * g.rows),
      Vl(d.vocab_rows) {}

int64_t tally_floats(const ModelConfig& c, const Shape& s) {
  return c.moe() && !(s.embed && s.head) ? tally_wire_floats(c.top_k, c.n_experts) : 0;
}

const List& ChunkPlan::layer(int64_t l) const {
  return moe_layers[static_cast<size_t>(l)] ? moe_layer : dense_layer;
}

int64_t ChunkPlan::shared_floats(MemKind kind) const {
  return floats(recompute, kind) + floats(shared, kind) + floats(moe, kind);
}

int64_t ChunkPlan::slot_floats(MemKind kind) const {
  int64_t f = floats(resid, kind) + floats(head, kind);
  if (recomputation) return f;
  const int64_t dense = floats(dense_layer, kind), experts = floats(moe_layer, kind);
  for (const bool m : moe_layers)
    f += m ? experts : dense;
  return f;
}

namespace {

constexpr MemKind kAct = MemKind::activation;
constexpr RecomputeModule kNorms = RecomputeModule::norms, kAttn = RecomputeModule::attention,
                          kMlp = RecomputeModule::mlp;

// A layer's entries that choice `r` recomputes (`recomputed`), or keeps.
List pick(const List& layer, const Recompute& r, bool recomputed) {
  List out;
  for (const Entry& e : layer)
    if (r.recomputes(e.by) == recomputed) out.push_back(e);
  return out;
}

// The sizes every buffer of a chunk is made of: N = B·T tokens; Nl those of
// the residual stream here (N / tp under SP); the widths this rank's.
struct Sizes {
  int64_t B, T, N, Nl, C, D, F, Q, QKV, heads, kv_heads, X;
  int64_t E, k, I, R, Rl;  // mixture of experts: R = N·k choices, Rl = R·ep rows this rank's experts may get
};

Sizes sizes_of(const ModelConfig& c, const TpDims& d, const Shape& s) {
  Sizes m{};
  m.B = s.B;
  m.T = s.T;
  m.N = s.B * s.T;
  m.Nl = s.sp ? m.N / s.tp : m.N;
  m.C = c.d_model;
  m.D = c.head_dim();
  m.F = d.ffn;
  m.heads = d.heads;
  m.kv_heads = d.kv_heads;
  m.Q = d.heads * m.D;
  m.QKV = m.Q + 2 * (s.kv_slots > 0 ? s.kv_slots : d.kv_heads) * m.D;  // the attention's kv heads
  m.X = tally_floats(c, s);
  m.E = c.n_experts;
  m.k = c.top_k;
  m.I = c.expert_hidden();
  m.R = m.N * m.k;
  m.Rl = m.R * s.ep;
  return m;
}

// What a mixture-of-experts layer saves (MoeActs): N tokens, their R = N·k
// choices, and the up to Rl = R·ep rows this rank's experts may receive.
void moe_acts(const Sizes& m, int64_t ep, List& out) {
  out.push_back({"moe.probs", {m.N, m.E}});
  out.push_back({"moe.lse", {m.N}});
  out.push_back({"moe.weights", {m.N, m.k}});
  out.push_back({"moe.xs", {m.R, m.C}});
  if (ep > 1) out.push_back({"moe.xl", {m.Rl, m.C}});
  out.push_back({"moe.gu", {m.Rl, 2 * m.I}});
  out.push_back({"moe.h", {m.Rl, m.I}});
  out.push_back({"moe.yk", {m.R, m.C}});
}

// LayerActs of a layer with the dense MLP and/or the experts (with
// recomputation the one set serves every layer: both when the stage has both),
// each entry with the module that recomputes it (the experts' are kept).
List layer_acts(const Sizes& m, const Shape& s, bool dense, bool moe) {
  List out;
  out.push_back({s.sp ? "ln1_full" : "ln1", {m.N, m.C}, kAct, kNorms});
  out.push_back({"rstd1", {m.Nl}, kAct, kNorms});
  out.push_back({"qkv", {m.N, m.QKV}});
  out.push_back({"att", {m.N, m.Q}, kAct, kAttn});
  out.push_back({"lse", {m.B, m.heads, m.T}, kAct, kAttn});
  out.push_back({"mid", {m.Nl, m.C}});
  out.push_back({s.sp ? "ln2_full" : "ln2", {m.N, m.C}, kAct, kNorms});
  if (s.sp && moe)
    out.push_back({"ln2", {m.Nl, m.C}, kAct, kNorms});  // the experts run on this rank's tokens
  out.push_back({"rstd2", {m.Nl}, kAct, kNorms});
  if (dense) {
    out.push_back({"gu", {m.N, 2 * m.F}});
    out.push_back({"h", {m.N, m.F}, kAct, kMlp});
  }
  if (moe) moe_acts(m, s.ep, out);
  // A split backward's B leaves each weight's output gradient (and the norms'
  // weight gradients) in the slot for its W (Llama::backward_input_slot).
  if (s.split_backward && dense) {
    out.push_back({"w_down", {m.Nl, m.C}});
    out.push_back({"w_gu", {m.N, 2 * m.F}});
    out.push_back({"w_o", {m.Nl, m.C}});
    out.push_back({"w_qkv", {m.N, m.QKV}});
    out.push_back({"w_norms", {2, m.C}});
  }
  return out;
}

// The backward's buffers (Llama::Buffers): dres carries the router statistics
// X after the residual gradient; part, kvg with tp; dfull, dln, normg with SP.
List shared_buffers(const Sizes& m, const Shape& s) {
  List out;
  if (s.sp && !s.head) out.push_back({"norm_out", {m.Nl, m.C}});
  out.push_back({"dres", m.X > 0 ? Dims{m.Nl * m.C + m.X} : Dims{m.Nl, m.C}});
  out.push_back({"dtmp", {m.Nl, m.C}});
  out.push_back({"dmid", {m.N, std::max({m.C, m.F, m.Q})}});
  out.push_back({"dqkv", {m.N, m.QKV}});
  out.push_back({"dgu", {m.N, 2 * m.F}});
  if (s.tp > 1) out.push_back({"part", {m.N, m.C}});
  // A replicated kv head's gradient; with canonical kv slots (parallel/canonical_tp_kv.h)
  // each slot's products dkᵀ·x and dvᵀ·x, in one process too.
  if (s.kv_slots > 0)
    out.push_back({"kvg", {s.kv_slots, 2 * m.D, m.C}, MemKind::scratch});
  else if (s.tp > 1)
    out.push_back({"kvg", {2 * m.kv_heads * m.D, m.C}, MemKind::scratch});
  // The canonical mode's per-piece partial sums of a row output or a column
  // input gradient (parallel/canonical_tp.h), with more than one piece here.
  if (s.pieces > 1 && s.canonical_d == 0) out.push_back({"leaves", {s.pieces, m.N, m.C}});
  // The norms' per-shard weight gradients (linear_plan.h NormEntry): c token
  // shards, c / tp of them here under SP, with more than one here.
  const int64_t shards = s.cp_pieces > 1 ? s.cp_pieces : s.sp ? s.pieces : s.pieces * s.tp;
  if (shards > 1 && s.canonical_d == 0) out.push_back({"nshards", {shards, m.C}, MemKind::scratch});
  if (s.sp) {
    out.push_back({"dfull", {m.N, m.C}});
    out.push_back({"dln", {m.Nl, m.C}});
    out.push_back({"normg", {2, m.C}, MemKind::scratch});
  }
  return out;
}

// Buffers' mixture-of-experts part, over the full N tokens: the router's
// logits and gradient, the weights' gradient, the expert rows' gradients.
List moe_buffers(const Sizes& m, const Shape& s) {
  List out;
  out.push_back({"rlogits", {m.N, m.E}});
  out.push_back({"drlogits", {m.N, m.E}});
  out.push_back({"dweights", {m.N, m.k}});
  out.push_back({"dyk", {m.R, m.C}});
  out.push_back({"dys", {m.Rl, m.C}});
  out.push_back({"dxs", {m.Rl, m.C}});
  out.push_back({"dgu_e", {m.Rl, 2 * m.I}});
  out.push_back({"dh_e", {m.Rl, m.I}});
  if (s.ep > 1) out.push_back({"xfer", {m.Rl, m.C}});
  // SP: one MoE layer's router and local experts' gradients, partial over tp.
  if (s.sp) out.push_back({"moeg", {m.E * m.C + (m.E / s.ep) * 3 * m.I * m.C}, MemKind::scratch});
  return out;
}

// The same on an R × C grid (R > 1): the residual stream d/(RC) wide, the
// inputs gathered over one sub-axis d/R (or Q/C, F/C) wide; one stage, dense
// layers, no SP.
void grid_plan(const ModelConfig& c, const TpDims& d, const Sizes& m, ChunkPlan& p, const Shape& s) {
  const GridWidths w(c, d, s.grid);
  const int64_t N = m.N;
  const List layer = {{"ln1", {N, w.dl}, kAct, kNorms},     {"ln1_full", {N, w.dR}, kAct, kNorms},
                      {"rstd1", {N}, kAct, kNorms},         {"qkv", {N, w.QKVl}},
                      {"att", {N, w.Ql}, kAct, kAttn},      {"lse", {m.B, d.heads, m.T}, kAct, kAttn},
                      {"att_full", {N, w.QC}, kAct, kAttn}, {"mid", {N, w.dl}},
                      {"ln2", {N, w.dl}, kAct, kNorms},     {"ln2_full", {N, w.dR}, kAct, kNorms},
                      {"rstd2", {N}, kAct, kNorms},         {"gu", {N, 2 * w.Fl}},
                      {"h", {N, w.Fl}, kAct, kMlp},         {"h_full", {N, w.FC}, kAct, kMlp}};
  if (s.recompute.any()) p.recompute = pick(layer, s.recompute, true);
  if (!s.recompute.full()) p.dense_layer = pick(layer, s.recompute, false);
  // The grid entries' layers need at most 3 N × (their widest side) floats.
  p.shared = {{"dres", {N, w.dl}},
              {"dtmp", {N, w.dl}},
              {"dln", {N, w.dl}},
              {"dmid", {N, std::max(w.Fl, w.Ql)}},
              {"dqkv", {N, w.QKVl}},
              {"dgu", {N, 2 * w.Fl}},
              {"grid", {3 * N * std::max({w.dR, w.QKVC, 2 * w.FC, w.QC, w.FC})}}};
  p.resid.assign(p.moe_layers.size() + 1, Entry{"resid", {N, w.dl}});
  p.head = {{"lnf", {N, w.dl}},    {"rstdf", {N}},  {"lnf_full", {N, w.dR}},
            {"logits", {N, w.Vl}}, {"losses", {N}}, {"lse_ce", {N}}};
}

// The canonical 2-D pieces' scratch (parallel/canonical_tp_grid.h): the most
// pieces a rank sums at a site and the widest local side of a site.
Entry pieces2d_scratch(const ModelConfig& c, const TpDims& d, const Sizes& m, const Shape& s) {
  const int64_t cc = std::max<int64_t>(s.canonical_c, 1), g = s.canonical_d;
  if (!tp::on_grid(s.grid))
    return {"pieces2d",
            {tp::pieces2d_scratch_floats(m.N, std::max({m.QKV, 2 * m.F, d.vocab_rows, m.C, m.Q}),
                                         std::max(cc, g))},
            MemKind::scratch};
  const GridWidths w(c, d, s.grid);
  const int64_t widest = std::max({w.QKVC, 2 * w.FC, w.Vl, w.dR, w.QC});
  const int64_t most = std::max(cc / s.grid.cols, g / s.grid.rows);
  return {"pieces2d", {tp::pieces2d_scratch_floats(m.N, widest, most)}, MemKind::scratch};
}

}  // namespace

ChunkPlan chunk_plan(const ModelConfig& c, const TpDims& d, const Shape& s) {
  const Sizes m = sizes_of(c, d, s);
  ChunkPlan p;
  p.moe_layers = s.moe_layers;
  const bool any_moe = std::count(s.moe_layers.begin(), s.moe_layers.end(), true) > 0;
  const bool any_dense = std::count(s.moe_layers.begin(), s.moe_layers.end(), false) > 0;
  if (any_moe) p.moe = moe_buffers(m, s);
  if (tp::on_grid(s.grid)) {
    grid_plan(c, d, m, p, s);
  } else {
    if (s.recompute.any()) p.recompute = pick(layer_acts(m, s, any_dense, any_moe), s.recompute, true);
    p.shared = shared_buffers(m, s);
    // The canonical mode's per-cp-piece weight gradients (parallel/cp_pieces.h): one leaf a piece of
    // the stage's largest weight (the head's when it holds it; the embedding's leaves are rows).
    if (s.cp_pieces > 1) {
      const int64_t w = std::max(
          {m.QKV * m.C, m.C * m.Q, 2 * m.F * m.C, m.C * m.F, s.head ? d.vocab_rows * m.C : int64_t{0}});
      p.shared.push_back({"cpwg", {s.cp_pieces, w}, MemKind::scratch});
    }
    const Dims resid = m.X > 0 ? Dims{m.Nl * m.C + m.X} : Dims{m.Nl, m.C};
    p.resid.assign(s.moe_layers.size() + 1, Entry{"resid", resid});
    if (!s.recompute.full() && any_dense)
      p.dense_layer = pick(layer_acts(m, s, true, false), s.recompute, false);
    if (!s.recompute.full() && any_moe) p.moe_layer = pick(layer_acts(m, s, false, true), s.recompute, false);
    if (s.head) {
      p.head = {{"lnf", {m.Nl, m.C}}, {"rstdf", {m.Nl}}};
      if (s.sp) p.head.push_back({"lnf_full", {m.N, m.C}});
      p.head.push_back({"logits", {m.N, d.vocab_rows}});
      p.head.push_back({"losses", {m.N}});
      p.head.push_back({"lse_ce", {m.N}});
      if (s.split_backward) p.head.push_back({"w_lnf", {m.C}});  // the final norm's weight gradient
    }
    // The first stage's W: the embedding's gradient rows, from B to W.
    if (s.split_backward && s.embed) p.head.push_back({"w_embed", {m.Nl, m.C}});
  }
  if (s.canonical_d > 1) p.shared.push_back(pieces2d_scratch(c, d, m, s));
  p.recomputation = s.recompute.full();
  return p;
}

}  // namespace mt::buffers

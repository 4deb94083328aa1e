#include "plan/cost.h"

#include <algorithm>
#include <cmath>

#include "cost/flops.h"
#include "model/params.h"
#include "pipeline/simulate.h"
#include "plan/cost_parts.h"
#include "plan/memory.h"

namespace mt::plan {

double Prediction::exposed_comm_s() const {
  double s = 0;
  for (const AxisComm& c : comm)
    s += c.exposed_s();
  return s;
}

double narayanan_flops(const ModelConfig& m, int64_t global_batch, int64_t seq_len) {
  const double B = double(global_batch), s = double(seq_len), l = double(m.n_layers), h = double(m.d_model);
  const double V = double(m.vocab_size);
  return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
}

namespace {

CpShape cp_shape(const PlanInput& in, const PlanLayout& l) {
  const TpDims td = tp_dims(in.model, TpRank{static_cast<int>(l.tp), 0});
  const int64_t U = l.cp_a2a_size();
  return {U, l.cp_ring_size(), double(td.heads / U), double(td.kv_heads >= U ? td.kv_heads / U : 1)};
}

double gemm_s(const StepCtx& c, double rows, double n, double k) {
  const auto i = [](double x) { return std::max<int64_t>(1, static_cast<int64_t>(x)); };
  return 2 * rows * n * k / c.m.gemm_rate(i(rows), i(n), i(k), c.ranks_on_node);
}

// A calibrated machine's measured layer kernels (plan/kernels.h), scaled to
// this layout's microbatch: attention by sequences × T² × d / tp and the
// heads' share after cp's all-to-all (under a ring its blocks, below), norms,
// RoPE and SwiGLU by tokens × (d + ffn)
// with tp's share; a rank has 1 / ranks of the node the measurement had (the
// one for the ranks this layout puts on the node). False when not measured.
bool measured_kernels(const StepCtx& c, double* attention_forward, double* elementwise) {
  const LayerKernels* measured = c.m.layer_kernels(c.ranks_on_node);
  if (measured == nullptr || measured->batch <= 0) return false;
  const LayerKernels& k = *measured;
  const ModelConfig& md = c.in.model;
  const double t = double(c.l.tp), T = double(c.in.seq_len), Tk = double(k.seq_len), share = c.ranks_on_node;
  const double heads =
      double(c.l.mbs) * double(md.d_model) / t / (double(k.batch) * double(k.d_model)) / double(c.cps.a2a);
  const double R = double(c.cps.ring);
  double attn = k.attention_s * heads * T * T / (Tk * Tk);
  if (R > 1 && k.attention_half_s > 0) {
    // A ring of R ranks computes R blocks of T/R queries against T/R keys,
    // each about half masked with the zigzag split (docs/PARALLELISM.md,
    // "Context parallelism"): R of the measured causal half-length attention,
    // scaled. Ulysses (R = 1) attends the whole sequence for its heads at once.
    const double block = T / R, half = Tk / 2;
    attn = R * k.attention_half_s * heads * block * block / (half * half);
  } else {
    attn /= R;
  }
  const double norms = c.l.sp ? double(md.d_model) / t : double(md.d_model);
  const double work = c.tokens * (norms + double(md.ffn_hidden) / t) /
                      (double(k.batch) * Tk * double(k.d_model + k.ffn_hidden));
  *attention_forward = attn * share / 3;          // forward : backward as 1 : 2
  *elementwise = k.elementwise_s * work * share;  // forward + backward
  return true;
}

// Forward of one microbatch through this rank's layers and, on the last
// stage, the head: each GEMM at its shape's rate (the MLP's gate and up
// projections as the one GEMM the trainer runs); causal attention's
// QKᵀ and PV (halved by the mask with flash-style attention, computed whole
// when the scores are materialised) for the heads after cp's all-to-all, in
// blocks of T / (the ring's ranks) tokens; element-wise traffic from the count of
// saved activation elements per token and layer (docs/PLANNER.md, "Time model").
StageWork stage_work(const StepCtx& c) {
  const ModelConfig& md = c.in.model;
  const double t = double(c.l.tp), d = double(md.d_model), tok = c.tokens;
  const double ffn = md.moe() ? double(md.top_k * md.expert_hidden()) : double(md.ffn_hidden);
  const double layer = gemm_s(c, tok, double(md.qkv_dim()) / t, d) +
                       gemm_s(c, tok, d, double(md.q_dim()) / t) + gemm_s(c, tok, 2 * ffn / t, d) +
                       gemm_s(c, tok, d, ffn / t);
  const double T = double(c.in.seq_len), hd = double(md.head_dim());
  // H_l / U heads over R blocks: U · R = cp, so every cp attention has the ring's FLOPs
  const double attn_flops =
      double(c.l.mbs) * c.cps.heads * hd * T * T * (c.in.flash_attention ? 2.0 : 4.0) / double(c.cps.ring);
  const int64_t Ti = std::max<int64_t>(1, c.in.seq_len / c.cps.ring), hdi = md.head_dim();
  double attn = attn_flops / c.m.gemm_rate(Ti, Ti, hdi, c.ranks_on_node), measured_elementwise = 0;
  const bool measured = measured_kernels(c, &attn, &measured_elementwise);
  const double layers = std::ceil(double(md.n_layers) / double(c.l.pp));
  const double head = gemm_s(c, tok, double(md.vocab_size) / t, d);
  StageWork w;
  w.attention = layers * attn;
  w.forward = layers * (layer + attn) + head;
  w.backward = 2 * w.forward;
  if (c.l.recompute == Recompute::full) w.recompute = layers * (layer + attn);
  if (c.l.recompute == Recompute::selective) w.recompute = layers * gemm_s(c, tok, 2 * ffn / t, d);
  const double a = double(md.n_heads), scores = c.in.flash_attention ? 0 : 2.5 * a * T / t;
  const double per_token = c.l.sp ? 17 * d / t + scores : (5 + 12 / t) * d + scores;
  // written forward, read backward, its gradient written and read; again when recomputed
  const double passes = c.l.recompute == Recompute::full ? 5 : 4;
  w.elementwise = layers * tok * per_token * c.sizes.activation * passes / c.m.memory_bytes_per_s;
  if (measured) w.elementwise = layers * measured_elementwise * (passes / 4);
  if (md.moe()) {
    // Each MoE layer copies a token's top_k rows into expert order and back
    // (dispatch and combine), forward and backward: 8 · top_k rows of d / tp
    // elements read or written per token, at this rank's share of the memory rate.
    const double moe_layers = std::ceil(double(md.n_moe_layers()) / double(c.l.pp));
    const double rate = c.m.memory_bytes_per_s / (c.m.shared_compute ? double(c.ranks_on_node) : 1.0);
    w.elementwise += moe_layers * tok * 8 * double(md.top_k) * d / t * c.sizes.activation / rate;
  }
  return w;
}

}  // namespace

Prediction predict(const PlanInput& in, const PlanLayout& l, const Machine& m) {
  check_layout(in, l);  // before the memory model, whose Config it validates
  return predict(in, l, m, plan_memory(in, l, m));
}

Prediction predict(const PlanInput& in, const PlanLayout& l, const Machine& m, const MemoryEstimate& memory) {
  check_layout(in, l);
  check_hier_nodes(l, m.devices_per_node);  // needs the machine's nodes, which check_layout has not
  const int ranks_on_node = static_cast<int>(std::min<int64_t>(in.devices, m.devices_per_node));
  const double tokens = double(l.mbs * in.seq_len / l.cp);
  const NodeMap placed = node_map(l, m.devices_per_node);
  const StepCtx c{in, l, m, ranks_on_node, precision_sizes(m.precision), tokens, cp_shape(in, l), placed};
  Prediction p;
  p.layout = l;
  p.memory = memory;
  p.fits = double(p.memory.total) <= m.rank_memory_bytes(in.devices);
  p.microbatches = in.global_batch / (l.dp * l.mbs);
  const double mb = double(p.microbatches);
  const StageWork w = stage_work(c);
  double per_mb = w.forward + w.backward + w.recompute + w.elementwise;
  std::vector<AxisComm> axes = microbatch_comm(c, w);
  for (AxisComm& a : axes) {  // per microbatch → per step
    per_mb += a.exposed_s();
    a.bytes *= mb, a.total_s *= mb, a.hidden_s *= mb;
  }
  p.compute_s = mb * (w.forward + w.backward + w.recompute);
  p.recompute_s = mb * w.recompute;
  p.elementwise_s = mb * w.elementwise;
  p.bubble_s = double(l.pp - 1) * per_mb / double(l.v);
  p.bubble_fraction =
      pp::ideal_bubble(static_cast<int>(l.pp), static_cast<int>(l.v), static_cast<int>(p.microbatches));
  if (l.zb) {
    // zbh1 idles (pp − 1)·(F + B − W) (docs/PARALLELISM.md "Pipeline
    // parallelism"): with the backward's two GEMMs per linear layer of equal
    // FLOPs, B = W = backward / 2, so (pp − 1)·(per_mb − backward); at
    // F = B = W the fraction (pp − 1)/(3m + pp − 1).
    p.bubble_s = double(l.pp - 1) * std::max(0.0, per_mb - w.backward);
    p.bubble_fraction = pp::schedule_bubble(pp::ScheduleKind::zbh1, static_cast<int>(l.pp), 1,
                                            static_cast<int>(p.microbatches));
  }
  if (l.pp > 1) axes.push_back(pp_comm(c, mb));
  const ModelConfig& md = in.model;
  // A rank's parameters: the dense ones ÷ (tp · pp), the experts also ÷ ep;
  // the experts' gradients are reduced only where ep leaves replicas of them.
  const double experts = md.moe() ? 3.0 * double(md.d_model * md.expert_hidden() * md.n_experts) *
                                        double(md.n_moe_layers()) / double(l.tp * l.pp)
                                  : 0.0;
  const double dense = double(checked_param_count(md)) / double(l.tp * l.pp) - experts;
  const double params = dense + experts / double(l.ep);
  const double reduced = l.dp * l.cp > l.ep ? params : dense;
  axes.push_back(dp_comm(c, reduced, p.microbatches, w.backward + w.recompute, p.compute_s));
  if (axes.back().total_s == 0) axes.pop_back();
  // The pass over this rank's share of the state: as calibrate measured it
  // (norm, clipping, AdamW; node seconds per element × the ranks sharing the
  // node), else AdamW's traffic — read parameter, gradient and two moments,
  // write three, in fp32 (28 B per element) — at the memory rate.
  const double owned = l.zero >= 1 ? params / double(l.shard_size() * l.cp) : params;
  const LayerKernels* k = m.layer_kernels(ranks_on_node);
  p.optimizer_s = k != nullptr && k->optimizer_s > 0 ? owned * k->optimizer_s * double(ranks_on_node)
                                                     : owned * 28 / m.memory_bytes_per_s;
  p.comm = axes;
  p.step_s = mb * per_mb + p.bubble_s + p.optimizer_s;
  for (const AxisComm& a : p.comm)
    if (a.axis == "pp" || a.axis == "dp") p.step_s += a.exposed_s();
  p.model_flops = train_flops_per_token(md, in.seq_len) * double(in.global_batch * in.seq_len);
  const double nodes = std::ceil(double(in.devices) / double(m.devices_per_node));
  const double peak = m.shared_compute ? nodes * m.peak_flops : double(in.devices) * m.peak_flops;
  p.mfu = p.model_flops / (p.step_s * peak);
  return p;
}

}  // namespace mt::plan

#include "plan/cost.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "cost/flops.h"
#include "model/params.h"
#include "pipeline/simulate.h"
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

// One stage's work for one microbatch (all its chunks), in seconds.
struct StageWork {
  double forward = 0, backward = 0, recompute = 0, attention = 0, elementwise = 0;
};

// cp's attention as the trainer runs it (parallel/cp_ulysses.h): the ranks of
// its all-to-all (1: none) and of its ring (1: none), and the local query and
// kv heads the attention sees after the all-to-all (Hu = H_l / U; KVu = KV_l /
// U, or the one kv head replicated when KV_l < U).
struct CpShape {
  int64_t a2a = 1, ring = 1;
  double heads = 1, kv_heads = 1;
};

CpShape cp_shape(const PlanInput& in, const PlanLayout& l) {
  const TpDims td = tp_dims(in.model, TpRank{static_cast<int>(l.tp), 0});
  const int64_t U = l.cp_a2a_size();
  return {U, l.cp_ring_size(), double(td.heads / U), double(td.kv_heads >= U ? td.kv_heads / U : 1)};
}

struct Ctx {
  const PlanInput& in;
  const PlanLayout& l;
  const Machine& m;
  int ranks_on_node;
  PrecisionSizes sizes;
  double tokens;  // rows of a microbatch on this rank: mbs · seq / cp
  CpShape cps;
  bool crosses(int64_t span) const { return span > m.devices_per_node; }
};

double gemm_s(const Ctx& c, double rows, double n, double k) {
  const auto i = [](double x) { return std::max<int64_t>(1, static_cast<int64_t>(x)); };
  return 2 * rows * n * k / c.m.gemm_rate(i(rows), i(n), i(k), c.ranks_on_node);
}

// A calibrated machine's measured layer kernels (plan/kernels.h), scaled to
// this layout's microbatch: attention by sequences × T² × d / tp and the
// heads' share after cp's all-to-all (under a ring its blocks, below), norms,
// RoPE and SwiGLU by tokens × (d + ffn)
// with tp's share; a rank has 1 / ranks of the node the measurement had (the
// one for the ranks this layout puts on the node). False when not measured.
bool measured_kernels(const Ctx& c, double* attention_forward, double* elementwise) {
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
StageWork stage_work(const Ctx& c) {
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

std::string describe(const char* op, double bytes, int64_t ranks, bool inter) {
  std::ostringstream os;
  os.precision(3);
  os << op << " " << bytes / (1 << 20) << " MiB over " << ranks
     << (inter ? " ranks (crosses nodes)" : " ranks");
  return os.str();
}

// Gradient reduction and ZeRO's parameter gathers over dp × cp; HSDP at ZeRO
// 2/3 reduce-scatters in the shard group and all-reduces the shard over the
// replicas, at ZeRO 1 all-reduces over dp × cp as the trainer does
// (parallel/data_parallel.h); its gathers stay in the shard group. ZeRO 0/1
// with hier: the hierarchical all-reduce (plan/collectives.h); the trainer's
// < g leftover elements a bucket, all-reduced over the whole group, are not
// charged (the model has no buckets). `backward_last` is the compute the
// reduction can run behind.
AxisComm dp_comm(const Ctx& c, double params, int64_t microbatches, double backward_last, double compute) {
  const PlanLayout& l = c.l;
  AxisComm a{"dp", "", 0, 0, 0, false};
  const int64_t group = l.dp * l.cp, shard = l.shard_size() * l.cp;
  if (group <= 1) return a;
  const double grads = params * c.sizes.gradient, weights = params * c.sizes.parameter;
  const bool inter = c.crosses(l.devices()), shard_inter = c.crosses(l.tp * l.cp * l.pp * l.shard_size());
  a.crosses_nodes = inter;
  double reduce = 0, gathers = 0;
  if (l.zero <= 1 && l.hier_dp) {
    const DpNodeSplit s = dp_node_split(l, c.m.devices_per_node);
    const HierAllReduce h = hierarchical_all_reduce(c.m, s, grads);
    reduce = h.total_s();
    a.crosses_nodes = s.n > 1;
    a.what = hier_what(grads, s, h);
  } else if (l.zero <= 1) {
    reduce = collective_time(c.m, "all_reduce", group, grads, inter,
                             l.devices() / group);  // all dp groups at once
    a.what = describe("grad all-reduce", grads, group, inter);
  } else {
    reduce = collective_time(c.m, "reduce_scatter", shard, grads, shard_inter, l.devices() / shard) +
             collective_time(c.m, "all_reduce", group / shard, grads / double(shard), inter,
                             l.devices() * shard / group);
    a.what = describe("grad reduce-scatter", grads, shard, shard_inter);
  }
  a.bytes = grads;
  if (l.zero >= 1) {  // the updated shards gathered again: once per step, or before each use under ZeRO-3
    const double times = l.zero == 3 ? 2.0 * double(microbatches) : 1.0;
    gathers = times * collective_time(c.m, "all_gather", shard, weights, shard_inter, l.devices() / shard);
    a.bytes += times * weights;
    a.what += l.zero == 3 ? "; param all-gather before each forward and backward" : "; param all-gather";
  }
  a.total_s = reduce + gathers;
  // The reduction runs behind the last microbatch's backward; ZeRO-3's gathers
  // are prefetched behind the compute they precede; ZeRO 1/2's gather follows
  // the update and is exposed.
  a.hidden_s = c.in.grad_overlap ? std::min(reduce, c.m.overlap * backward_last) : 0.0;
  if (l.zero == 3) a.hidden_s += std::min(gathers, c.m.overlap * std::max(0.0, compute - backward_last));
  return a;
}

// tp per microbatch (all chunks of this rank): two all-reduces of the
// activations (or SP's all-gather + reduce-scatter pairs, the same ring
// volume) per layer and direction, again in a full recomputation; SP's
// all-reduce of the norms' weight gradients per layer; the vocab-parallel
// embedding's and head's pairs (one each on the first and last stage) and the
// vocab-parallel cross-entropy's three all-reduces of a float per token
// (max, sum of exponentials, target logit) on the last stage — each message
// its latency as well as its bytes (the ledger of docs/PARALLELISM.md,
// "Tensor parallelism").
AxisComm tp_comm(const Ctx& c, double layers, double act) {
  const PlanLayout& l = c.l;
  const bool inter = c.crosses(l.tp);
  const double ends = l.pp == 1 ? 2 : 1;  // the busiest stage: the last (head), or the only one
  const double calls = layers * (l.recompute == Recompute::full ? 6 : 4) + ends;
  const double token = c.tokens * 4, norms = 2 * double(c.in.model.d_model) * 4;
  AxisComm a{"tp",
             describe(l.sp ? "all-gather + reduce-scatter pairs of" : "all-reduces of", act, l.tp, inter),
             calls * act + 3 * token,
             0,
             0,
             inter};
  a.total_s = calls * collective_time(c.m, "all_reduce", l.tp, act, inter) +
              3 * collective_time(c.m, "all_reduce", l.tp, token, inter);
  if (l.sp) {
    a.bytes += layers * norms;
    a.total_s += layers * collective_time(c.m, "all_reduce", l.tp, norms, inter);
  }
  return a;
}

// Across nodes (tp innermost, consecutive cp ranks): an all-to-all of U with g ranks on a node sends
// (U − g)/U of a buffer over the link; a ring's members on a node are consecutive in ring order, one
// edge per direction leaves it per ring. On a shared link (Machine::shared_link) the flows leaving a
// node at once share it: all its ranks' for the all-to-all, one per ring for a hop.
double a2a_across_s(const Ctx& c, double U, double bytes) {
  const double dpn = c.m.devices_per_node, g = std::clamp(dpn / double(c.l.tp), 1.0, U);
  const double rate = c.m.inter.bytes_per_s / (c.m.shared_link ? dpn : 1.0);
  const double across = (U - g) / U * bytes / rate, inside = (g - 1) / U * bytes / c.m.intra.bytes_per_s;
  return (U - 1) * c.m.inter.alpha_s + std::max(across, inside);
}
double ring_members_on_node(const Ctx& c, const CpShape& s) {  // of every U-th of the node's cp ranks
  return std::max(1.0,
                  std::clamp(double(c.m.devices_per_node) / double(c.l.tp), 1.0, double(c.l.cp)) / s.a2a);
}
double ring_hop_s(const Ctx& c, const CpShape& s, double bytes) {
  const double members = ring_members_on_node(c, s);
  if (members >= double(s.ring)) return collective_time(c.m, "send_recv", 2, bytes, false);
  return c.m.inter.alpha_s +
         bytes * (c.m.shared_link ? c.m.devices_per_node / members : 1.0) / c.m.inter.bytes_per_s;
}

// cp per microbatch, from the ledgers of parallel/cp_ulysses.h and context_parallel.h (n = the rank's
// tokens; docs/PLANNER.md "cp's attention"): the four all-to-alls per layer over U ranks, U·n·width
// elements each, blocking, so exposed; the ring's R − 1 hops per layer of [k|v|pos] forward and
// backward and of [dk|dv] backward over U·n tokens and KVu heads, behind the attention × overlap.
// Full recomputation runs each layer's forward exchanges again.
void cp_comm(const Ctx& c, const StageWork& w, double layers, std::vector<AxisComm>* out) {
  const CpShape& s = c.cps;
  const double D = double(c.in.model.head_dim()), n = c.tokens, el = c.sizes.activation;
  const double forwards = c.l.recompute == Recompute::full ? 2 : 1;
  if (s.a2a > 1) {
    const bool inter = c.crosses(c.l.tp * s.a2a);  // consecutive cp ranks, tp innermost
    const double U = double(s.a2a), Hu = s.heads, row = (Hu + 2 * s.kv_heads) * D;
    const double widths[] = {row + 1, Hu * D + Hu, row + 2 * Hu * D + Hu + 1, row};
    const double times[] = {forwards, forwards, 1, 1};  // per layer: the forward's two, the backward's two
    AxisComm a{"cp", "", 0, 0, 0, inter};
    double per_layer = 0;
    for (int i = 0; i < 4; ++i) {
      const double bytes = U * n * widths[i] * el;
      per_layer += bytes;
      a.bytes += layers * times[i] * bytes;
      a.total_s +=
          layers * times[i] *
          (inter ? a2a_across_s(c, U, bytes) : collective_time(c.m, "all_to_all", s.a2a, bytes, false));
    }
    a.what = describe(
        "all-to-alls of q, k, v, out forward and q, k, v, out, dout, dq, dk, dv backward (per layer)",
        per_layer, s.a2a, inter);
    out->push_back(a);
  }
  if (s.ring > 1) {
    const bool inter = ring_members_on_node(c, s) < double(s.ring);
    const double tokens = double(s.a2a) * n, kv = 2 * s.kv_heads * D;
    const double block = tokens * (kv + 1) * el, grads = tokens * kv * el, hops = layers * double(s.ring - 1);
    AxisComm r{"cp",
               describe(s.a2a > 1 ? "ring passes across the all-to-all groups of k, v, pos"
                                  : "ring passes of k, v, pos",
                        block, s.ring, inter),
               hops * ((forwards + 1) * block + grads),
               0,
               0,
               inter};
    r.total_s = hops * ((forwards + 1) * ring_hop_s(c, s, block) + ring_hop_s(c, s, grads));
    // behind the attention forward, backward (2×) and, with full recomputation, its second forward
    r.hidden_s = std::min(r.total_s, c.m.overlap * (2 + forwards) * w.attention);
    out->push_back(r);
  }
}

// Per microbatch (all chunks of this rank): tp's (above); cp's (above); ep's
// exchange of expert counts and its dispatch and combine all-to-alls per MoE
// layer and direction.
std::vector<AxisComm> microbatch_comm(const Ctx& c, const StageWork& w) {
  const ModelConfig& md = c.in.model;
  const PlanLayout& l = c.l;
  const double layers = std::ceil(double(md.n_layers) / double(l.pp));
  const double act = c.tokens * double(md.d_model) * c.sizes.activation;
  std::vector<AxisComm> out;
  if (l.tp > 1) out.push_back(tp_comm(c, layers, act));
  if (l.cp > 1) cp_comm(c, w, layers, &out);
  if (l.ep > 1 && md.moe()) {
    const bool inter = c.crosses(l.ep <= l.cp ? l.tp * l.ep : l.devices() / l.dp * (l.ep / l.cp));
    const double rows = c.tokens * double(md.top_k) * double(md.d_model) * c.sizes.activation / double(l.tp);
    const double moe_layers = double(md.n_moe_layers()) / double(l.pp);
    // each MoE layer: the expert counts, then the rows out and back, forward and backward
    const double counts = double(l.ep * md.n_experts) * 4, calls = 4 * moe_layers;
    out.push_back({"ep", describe("token all-to-alls of", rows, l.ep, inter),
                   calls * rows + moe_layers * counts,
                   calls * collective_time(c.m, "all_to_all", l.ep, rows, inter) +
                       moe_layers * collective_time(c.m, "all_to_all", l.ep, counts, inter),
                   0, inter});
  }
  return out;
}

}  // namespace

Prediction predict(const PlanInput& in, const PlanLayout& l, const Machine& m) {
  check_layout(in, l);
  check_hier_nodes(l, m.devices_per_node);  // needs the machine's nodes, which check_layout has not
  const int ranks_on_node = static_cast<int>(std::min<int64_t>(in.devices, m.devices_per_node));
  const double tokens = double(l.mbs * in.seq_len / l.cp);
  const Ctx c{in, l, m, ranks_on_node, precision_sizes(m.precision), tokens, cp_shape(in, l)};
  Prediction p;
  p.layout = l;
  p.memory = plan_memory(in, l, m);
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
  if (l.pp > 1) {  // each chunk boundary: activations forward, their gradients backward, on the critical path
    const bool inter = c.crosses(l.tp * l.cp * l.pp);
    const double act = c.tokens * double(in.model.d_model) * c.sizes.activation / double(l.sp ? l.tp : 1);
    const double msgs = 2 * mb * double(l.v);
    axes.push_back({"pp", describe("sends of", act, 2, inter), msgs * act,
                    msgs * collective_time(m, "send_recv", 2, act, inter), 0, inter});
  }
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

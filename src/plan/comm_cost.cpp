// Each axis's communication in the time model (docs/PLANNER.md, "Time model"):
// which collectives a step runs, their bytes, whether the group crosses nodes
// under the layout's node order (plan/node_order.h), and what of them hides.
#include <algorithm>
#include <cmath>
#include <sstream>

#include "plan/cost_parts.h"

namespace mt::plan {

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
AxisComm dp_comm(const StepCtx& c, double params, int64_t microbatches, double backward_last,
                 double compute) {
  const PlanLayout& l = c.l;
  AxisComm a{"dp", "", 0, 0, 0, false};
  const int64_t group = l.dp * l.cp, shard = l.shard_size() * l.cp;
  if (group <= 1) return a;
  const double grads = params * c.sizes.gradient, weights = params * c.sizes.parameter;
  const bool inter = c.crosses(PlanGroup::dp_cp), shard_inter = c.crosses(PlanGroup::shard);
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
             collective_time(c.m, "all_reduce", group / shard, grads / double(shard),
                             c.crosses(PlanGroup::replicas), l.devices() * shard / group);
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

namespace {

// tp per microbatch (all chunks of this rank): two all-reduces of the
// activations (or SP's all-gather + reduce-scatter pairs, the same ring
// volume) per layer and direction, again in a full recomputation; SP's
// all-reduce of the norms' weight gradients per layer; the vocab-parallel
// embedding's and head's pairs (one each on the first and last stage) and the
// vocab-parallel cross-entropy's three all-reduces of a float per token
// (max, sum of exponentials, target logit) on the last stage — each message
// its latency as well as its bytes (the ledger of docs/PARALLELISM.md,
// "Tensor parallelism").
AxisComm tp_comm(const StepCtx& c, double layers, double act) {
  const PlanLayout& l = c.l;
  const bool inter = c.crosses(PlanGroup::tp);
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

// Across nodes: an all-to-all of U with g ranks on a node (node_map) sends (U − g)/U of a buffer over
// the link; a ring's members on a node are consecutive in ring order, one edge per direction leaves it
// per ring. On a shared link (Machine::shared_link) the flows leaving a node at once share it: all its
// ranks' for the all-to-all, one per ring for a hop.
double a2a_across_s(const StepCtx& c, PlanGroup group, double U, double bytes) {
  const double dpn = c.m.devices_per_node, g = double(c.nodes[group].g);
  const double rate = c.m.inter.bytes_per_s / (c.m.shared_link ? dpn : 1.0);
  const double across = (U - g) / U * bytes / rate, inside = (g - 1) / U * bytes / c.m.intra.bytes_per_s;
  return (U - 1) * c.m.inter.alpha_s + std::max(across, inside);
}
double ring_hop_s(const StepCtx& c, const CpShape& s, double bytes) {
  const double members = double(c.nodes[PlanGroup::cp_ring].g);  // of one ring, on a node
  if (members >= double(s.ring)) return collective_time(c.m, "send_recv", 2, bytes, false);
  return c.m.inter.alpha_s +
         bytes * (c.m.shared_link ? c.m.devices_per_node / members : 1.0) / c.m.inter.bytes_per_s;
}

// cp per microbatch, from the ledgers of parallel/cp_ulysses.h and context_parallel.h (n = the rank's
// tokens; docs/PLANNER.md "cp's attention"): the four all-to-alls per layer over U ranks, U·n·width
// elements each, blocking, so exposed; the ring's R − 1 hops per layer of [k|v|pos] forward and
// backward and of [dk|dv] backward over U·n tokens and KVu heads, behind the attention × overlap.
// Full recomputation runs each layer's forward exchanges again.
void cp_comm(const StepCtx& c, const StageWork& w, double layers, std::vector<AxisComm>* out) {
  const CpShape& s = c.cps;
  const double D = double(c.in.model.head_dim()), n = c.tokens, el = c.sizes.activation;
  const double forwards = c.l.recompute == Recompute::full ? 2 : 1;
  if (s.a2a > 1) {
    const bool inter = c.crosses(PlanGroup::cp_a2a);
    const double U = double(s.a2a), Hu = s.heads, row = (Hu + 2 * s.kv_heads) * D;
    const double widths[] = {row + 1, Hu * D + Hu, row + 2 * Hu * D + Hu + 1, row};
    const double times[] = {forwards, forwards, 1, 1};  // per layer: the forward's two, the backward's two
    AxisComm a{"cp", "", 0, 0, 0, inter};
    double per_layer = 0;
    for (int i = 0; i < 4; ++i) {
      const double bytes = U * n * widths[i] * el;
      per_layer += bytes;
      a.bytes += layers * times[i] * bytes;
      a.total_s += layers * times[i] *
                   (inter ? a2a_across_s(c, PlanGroup::cp_a2a, U, bytes)
                          : collective_time(c.m, "all_to_all", s.a2a, bytes, false));
    }
    a.what = describe(
        "all-to-alls of q, k, v, out forward and q, k, v, out, dout, dq, dk, dv backward (per layer)",
        per_layer, s.a2a, inter);
    out->push_back(a);
  }
  if (s.ring > 1) {
    const bool inter = c.crosses(PlanGroup::cp_ring);
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

}  // namespace

// Per microbatch (all chunks of this rank): tp's (above); cp's (above); ep's
// exchange of expert counts and its dispatch and combine all-to-alls per MoE
// layer and direction.
std::vector<AxisComm> microbatch_comm(const StepCtx& c, const StageWork& w) {
  const ModelConfig& md = c.in.model;
  const PlanLayout& l = c.l;
  const double layers = std::ceil(double(md.n_layers) / double(l.pp));
  const double act = c.tokens * double(md.d_model) * c.sizes.activation;
  std::vector<AxisComm> out;
  if (l.tp > 1) out.push_back(tp_comm(c, layers, act));
  if (l.cp > 1) cp_comm(c, w, layers, &out);
  if (l.ep > 1 && md.moe()) {
    const bool inter = c.crosses(PlanGroup::ep);
    // Every tp rank routes the tokens it holds: all of the microbatch's, or 1/tp of them under SP
    // (measured: the ledger's ep bytes at tp 2 without SP are the whole microbatch's rows).
    const double held = l.sp ? c.tokens / double(l.tp) : c.tokens;
    const double rows = held * double(md.top_k) * double(md.d_model) * c.sizes.activation;
    const double moe_layers = double(md.n_moe_layers()) / double(l.pp);
    // each MoE layer: the expert counts, then the rows out and back, forward and backward; across
    // nodes every rank of a node sends its share at once (a2a_across_s, as cp's all-to-all)
    const double counts = double(l.ep * md.n_experts) * 4, calls = 4 * moe_layers, E = double(l.ep);
    const double rows_s = inter ? a2a_across_s(c, PlanGroup::ep, E, rows)
                                : collective_time(c.m, "all_to_all", l.ep, rows, false);
    out.push_back(
        {"ep", describe("token all-to-alls of", rows, l.ep, inter), calls * rows + moe_layers * counts,
         calls * rows_s + moe_layers * collective_time(c.m, "all_to_all", l.ep, counts, inter), 0, inter});
  }
  return out;
}

// pp at each chunk boundary: the activations forward and their gradients
// backward (with sp 1/tp of them), on the critical path.
AxisComm pp_comm(const StepCtx& c, double microbatches) {
  const PlanLayout& l = c.l;
  const bool inter = c.crosses(PlanGroup::pp);
  const double act = c.tokens * double(c.in.model.d_model) * c.sizes.activation / double(l.sp ? l.tp : 1);
  const double msgs = 2 * microbatches * double(l.v);
  const double s = msgs * collective_time(c.m, "send_recv", 2, act, inter);
  return {"pp", describe("sends of", act, 2, inter), msgs * act, s, 0, inter};
}

}  // namespace mt::plan

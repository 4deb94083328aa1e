// The mixture-of-experts layer (Mixtral; docs/MODEL.md "Mixture of
// experts"): the router, the tokens' way to their experts and back
// (parallel/expert_parallel.h), each expert a SwiGLU run as one GEMM chain over
// its block of rows, the weighted combine; its backward; the load-balancing
// loss and the z-loss, pooled over the microbatch's MoE layers; the statistics
// and the aux-loss-free bias.
#include <algorithm>
#include <string>

#include "core/device_mirror.h"
#include "core/error.h"
#include "core/threads.h"
#include "model/llama_internal.h"
#include "ops/gemm.h"
#include "ops/moe_kernels.h"
#include "ops/primitives.h"
#include "ops/router.h"
#include "ops/swiglu.h"
#include "parallel/linear_plan.h"
#include "parallel/token_sums.h"

namespace mt {

namespace {

// A block of rows one expert's products run over, and the source rank of the
// ep group whose atom they are.
struct RowBlock {
  int64_t source = 0, r0 = 0, n = 0;
};

// Expert e's rows: one block, or in the canonical mode under ep one per source
// atom (its rows from ep rank 0, then 1, …: the expert-major order of
// to_experts), so that each product has the shape of one process's.
std::vector<RowBlock> expert_blocks(const ep::RoutePlan& p, int64_t e, bool per_source) {
  const auto j = static_cast<size_t>(e);
  if (!per_source) return {{0, p.loffset[j], p.lcount[j]}};
  const size_t El = p.lcount.size(), P = p.recv_count.size() / El;
  std::vector<RowBlock> blocks;
  int64_t r0 = p.loffset[j];
  for (size_t i = 0; i < P; ++i) {
    const int64_t n = p.recv_count[i * El + j];
    blocks.push_back({static_cast<int64_t>(i), r0, n});
    r0 += n;
  }
  return blocks;
}

}  // namespace

// The local experts' chains: side by side, one expert per thread, when there
// are at least two per thread — each chain then runs on one thread (OpenBLAS's
// OpenMP build and our kernels run serially inside a parallel region), a layer
// is one parallel region instead of three per expert, and no thread waits on
// another inside a chain (docs/BENCHMARKS.md "Mixture of experts and expert
// parallelism"). Fewer experts: one after the other, each over every thread.
template <class F>
void Llama::for_each_expert(F&& f) const {
  const int64_t n = dispatch_.local_experts();
  if (n >= 2 * static_cast<int64_t>(num_threads())) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t e = 0; e < n; ++e)
      f(e);
  } else {
    for (int64_t e = 0; e < n; ++e)
      f(e);
  }
}

void Llama::moe_init() {
  const int64_t E = cfg_.n_experts;
  router_bias_.assign(static_cast<size_t>(n_stage_layers_), {});
  moe_stats_.layers.clear();
  moe_stats_.token_owner = tpr_.rank == 0 || sp_on();
  for (int64_t l = 0; l < n_stage_layers_; ++l) {
    if (!rel_[static_cast<size_t>(l)].moe()) continue;
    moe_stats_.layers.push_back(table_.stage.first_layer + l);
    if (cfg_.router_bias_rate > 0 || cfg_.router_skew > 0) {
      router_bias_[static_cast<size_t>(l)].assign(static_cast<size_t>(E), 0.0f);
      router_bias_[static_cast<size_t>(l)][0] = static_cast<float>(cfg_.router_skew);
    }
  }
  if (moe_stats_.layers.empty()) return;
  if (opts_.canonical && dispatch_.distributed()) {
    buf_->expert_leaves.resize(static_cast<size_t>(n_stage_layers_));
    for (int64_t l = 0; l < n_stage_layers_; ++l)
      if (rel_[static_cast<size_t>(l)].moe())
        buf_->expert_leaves[static_cast<size_t>(l)] =
            ep::ExpertLeaves(dispatch_.local_experts() * 3 * cfg_.expert_hidden() * cfg_.d_model);
  }
  buf_->allocate(buf_->plan.moe);  // model/buffer_plan.h
  begin_step(1);
}

void Llama::moe_forward(int64_t l, const float* P, LayerActs& a, float* x_out, bool tally) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  MoeActs& m = a.moe;
  const int64_t N = Nl_, C = cfg_.d_model, E = cfg_.n_experts, k = cfg_.top_k, I = cfg_.expert_hidden();
  const RouterDims rd{N, E, k};
  // With ep > 1 the experts read the rows received from the ep group and write
  // theirs to xfer, which goes back (parallel/expert_parallel.h).
  const bool ep = dispatch_.distributed();
  float* xin = ep ? m.xl.data() : m.xs.data();
  float* yout = ep ? buf_->xfer.data() : buf_->dxs.data();
  double margin = 0;
  {
    MT_TIMED(Kernel::other);  // the router: logits, softmax, top-k, the plan, the dispatch
    linear_forward(buf_->rlogits.data(), a.ln2.data(), P + o.router, N, C, E);
    const std::vector<float>& bias = router_bias_[static_cast<size_t>(l)];
    DeviceScratch<float> bias_dev(static_cast<int64_t>(bias.size()));
    if (!bias.empty()) copy_from_host(bias_dev.data(), bias.data(), E * int64_t{sizeof(float)}, "router");
    margin = router_forward(m.probs.data(), m.lse.data(), m.experts.data(), m.weights.data(),
                            buf_->rlogits.data(), bias.empty() ? nullptr : bias_dev.data(), rd);
    const std::string label = "layer " + std::to_string(table_.stage.first_layer + l) + " moe forward";
    // The route is planned on the host: the choices cross out, the plan's index arrays back in.
    const HostView<int32_t> experts(m.experts.data(), N * k, "moe routing");
    dispatch_.plan(m.plan, experts.data(), N * k, ep::expert_capacity(cfg_.capacity_factor, N, k, E), label);
    dispatch_.dispatch(m.xs.data(), a.ln2.data(), m.plan, k, C);
    if (ep) dispatch_.to_experts(xin, m.xs.data(), m.plan, C, label);
    if (tally) moe_tally_layer(a, experts.data(), margin);
  }
  {
    MT_TIMED(Kernel::gemm);  // the experts' GEMM chains with their SwiGLU
    const bool per_source = !buf_->expert_leaves.empty();
    for_each_expert([&](int64_t e) {                   // one GEMM chain per local expert over its rows
      const float* W = P + o.experts + e * 3 * I * C;  // w1|w3 [2I, C], then w2 [C, I]
      for (const RowBlock& b : expert_blocks(m.plan, e, per_source)) {
        if (b.n == 0) continue;
        linear_forward(m.gu.data() + b.r0 * 2 * I, xin + b.r0 * C, W, b.n, C, 2 * I);
        swiglu_forward(m.h.data() + b.r0 * I, m.gu.data() + b.r0 * 2 * I, b.n, I);
        // The expert outputs (the inputs are kept: dW13 reads them).
        linear_forward(yout + b.r0 * C, m.h.data() + b.r0 * I, W + 2 * I * C, b.n, I, C);
      }
    });
  }
  MT_TIMED(Kernel::other);
  if (ep)
    dispatch_.from_experts(buf_->dxs.data(), yout, m.plan, C,
                           "layer " + std::to_string(table_.stage.first_layer + l) + " moe forward");
  dispatch_.combine(m.yk.data(), buf_->dxs.data(), m.plan, C);
  // x_out = mid + Σ_s w[n, s] · yk[n·k + s], in slot order.
  if (x_out != nullptr) moe_weighted_sum(x_out, a.mid.data(), m.weights.data(), m.yk.data(), N, k, C);
}

// The microbatch's router statistics of one layer: the choices (on the host
// already), the probabilities and the logsumexps, crossing out.
void Llama::moe_tally_layer(const LayerActs& a, const int32_t* experts, double margin) {
  const MoeActs& m = a.moe;
  const int64_t N = Nl_, E = cfg_.n_experts, k = cfg_.top_k;
  const HostView<float> probs(m.probs.data(), N * E, "moe routing");
  const HostView<float> lse(m.lse.data(), N, "moe routing");
  MoeTally& t = cur_->tally;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t s = 0; s < k; ++s)
      ++t.count[static_cast<size_t>(s * E + experts[n * k + s])];
    for (int64_t e = 0; e < E; ++e)
      t.psum[static_cast<size_t>(e)] += probs[n * E + e];
    t.zsum += static_cast<double>(lse[n]) * lse[n];
  }
  t.rows += N;
  t.margin = std::min(t.margin, margin);
}

void Llama::moe_backward(int64_t l, const float* P, float* G, LayerActs& a, const float* dres, float* dln2) {
  const LayerParamOffsets& o = rel_[static_cast<size_t>(l)];
  MoeActs& m = a.moe;
  Buffers& b = *buf_;
  const int64_t N = Nl_, C = cfg_.d_model, E = cfg_.n_experts, k = cfg_.top_k;
  // Under SP each tp rank's gradients of the router and experts are its
  // tokens' share, Partial over tp: they collect in moeg and are summed below.
  const tp::PartialGrads moe_grads = plan_.partial_grads(b.moeg.data(), b.moeg.numel());
  float* grouter = moe_grads.into(G + o.router, 0);
  float* gexp = grouter + E * C;  // the experts follow the router [E, C] (params.h)
  {  // the step's statistics, from the plan (the same whether the forward was recomputed)
    const int64_t gl = table_.stage.first_layer + l;
    const auto j = static_cast<size_t>(std::find(moe_stats_.layers.begin(), moe_stats_.layers.end(), gl) -
                                       moe_stats_.layers.begin());
    for (int64_t e = 0; e < E; ++e)
      moe_stats_.tokens_per_expert[j][static_cast<size_t>(e)] += m.plan.routed[static_cast<size_t>(e)];
    moe_stats_.dropped += m.plan.dropped;
  }
  {
    MT_TIMED(Kernel::other);  // through the weighted sum: dyk = w · dres, dw = dres · yk
    moe_weighted_sum_backward(b.dyk.data(), b.dweights.data(), dres, m.weights.data(), m.yk.data(), N, k, C);
    dispatch_.combine_backward(b.dys.data(), b.dyk.data(), m.plan, C);
  }
  if (dispatch_.distributed()) {  // the exchanges of the forward, mirrored
    const std::string label = "layer " + std::to_string(table_.stage.first_layer + l) + " moe backward";
    dispatch_.to_experts(b.xfer.data(), b.dys.data(), m.plan, C, label);
    moe_experts_backward(o, P, gexp, a, b.xfer.data(), b.dxs.data());
    store_->poll();
    MT_TIMED(Kernel::other);
    dispatch_.from_experts(b.dys.data(), b.dxs.data(), m.plan, C, label);
    dispatch_.dispatch_backward(dln2, b.dys.data(), m.plan, k, C);
  } else {
    moe_experts_backward(o, P, gexp, a, b.dys.data(), b.dxs.data());
    store_->poll();
    MT_TIMED(Kernel::other);
    dispatch_.dispatch_backward(dln2, b.dxs.data(), m.plan, k, C);
  }
  MT_TIMED(Kernel::other);
  // The router: the weights' gradient, the load-balancing loss's (the same
  // vector for every row: it depends on the pooled counts) and the z-loss's,
  // each scaled by its coefficient over the step's microbatches.
  const MoeTally& t = cur_->tally;
  const double R = static_cast<double>(t.rows), M = static_cast<double>(microbatches_ * opts_.moe_groups);
  const std::vector<float> dprob = t.aux_grad(E, cfg_.router_aux_loss_coef / M);
  DeviceScratch<float> dprob_dev(E);
  copy_from_host(dprob_dev.data(), dprob.data(), E * int64_t{sizeof(float)}, "router");
  const auto z_scale = static_cast<float>(cfg_.router_z_loss_coef / M * 2.0 / R);
  router_backward(b.drlogits.data(), b.dweights.data(), dprob_dev.data(), z_scale, m.probs.data(),
                  m.lse.data(), m.experts.data(), m.weights.data(), {N, E, k});
  // dRouter += dlogitsᵀ · ln2; dln2 += dlogits · Router.
  linear_backward(b.dxs.data(), grouter, b.drlogits.data(), a.ln2.data(), P + o.router, N, C, E);
  add(dln2, b.dxs.data(), N * C);
  const int64_t n = b.moeg.numel();
  moe_grads.finish({{G + o.router, n}}, labels_[static_cast<size_t>(l)].router, "sp moe grads", {n});
}

// Each local expert's GEMM chain backward over its block of rows: from
// dys to dxs (expert-major, plan.loffset), accumulating its w1|w3 and w2
// gradients — in the canonical mode under ep each source atom's into its own
// leaf of the tree over the ep group's atoms, whose root becomes this
// microbatch's expert gradients when the step's last leaf is in.
void Llama::moe_experts_backward(const LayerParamOffsets& o, const float* P, float* gexp, LayerActs& a,
                                 const float* dys, float* dxs) {
  MoeActs& m = a.moe;
  Buffers& b = *buf_;
  const int64_t C = cfg_.d_model, I = cfg_.expert_hidden();
  const float* xin = dispatch_.distributed() ? m.xl.data() : m.xs.data();
  ep::ExpertLeaves* leaves = nullptr;
  std::vector<float*> src;  // per source atom: its leaf (canonical under ep), else gexp
  if (!buf_->expert_leaves.empty()) {
    leaves = &buf_->expert_leaves[static_cast<size_t>(&o - rel_.data())];
    if (microbatch_ == 0)
      leaves->begin_step(opts_.mesh.ep->size() * microbatches_);  // the step's first backward
    for (int64_t i = 0; i < opts_.mesh.ep->size(); ++i)
      src.push_back(leaves->take());
  } else {
    src.push_back(gexp);
  }
  {
    MT_TIMED(Kernel::gemm);           // the experts' GEMM chains with their SwiGLU
    for_each_expert([&](int64_t e) {  // each expert writes its own rows and gradients
      const int64_t w = o.experts + e * 3 * I * C;
      for (const RowBlock& r : expert_blocks(m.plan, e, leaves != nullptr)) {
        if (r.n == 0) continue;
        float* g = src[static_cast<size_t>(r.source)] + e * 3 * I * C;
        float* dh = b.dh_e.data() + r.r0 * I;
        float* dgu = b.dgu_e.data() + r.r0 * 2 * I;
        linear_backward(dh, g + 2 * I * C, dys + r.r0 * C, m.h.data() + r.r0 * I, P + w + 2 * I * C, r.n, I,
                        C);
        swiglu_backward(dgu, dh, m.gu.data() + r.r0 * 2 * I, r.n, I);
        linear_backward(dxs + r.r0 * C, g, dgu, xin + r.r0 * C, P + w, r.n, C, 2 * I);
      }
    });
  }
  if (leaves == nullptr) return;
  for (size_t i = 0; i < src.size(); ++i)  // source i's atom: i·M + m of the ep group's block
    leaves->insert(static_cast<int64_t>(i) * microbatches_ + microbatch_number_, src[i]);
  if (leaves->complete())  // the rest of the step's leaves hold zeros here: the root passes through
    copy_bytes(gexp, leaves->root(), leaves->numel() * int64_t{sizeof(float)});
}

void Llama::moe_after_backward(const Slot& sl) {
  if (!cfg_.moe()) return;
  // The slot's tally holds the microbatch's totals (moe_tally_backward), so
  // every stage reports the same losses, with or without MoE layers of its own.
  MoeStats& st = moe_stats_;
  const int64_t E = cfg_.n_experts;
  st.aux_loss += sl.tally.aux_loss(E) / static_cast<double>(microbatches_);
  st.z_loss += sl.tally.z_loss() / static_cast<double>(microbatches_);
  st.min_topk_margin = std::min(st.min_topk_margin, sl.tally.margin);
  ++st.microbatches;
  if (cfg_.router_bias_rate <= 0 || microbatch_ != microbatches_ - 1) return;
  // After the step's last backward: each expert's bias moves toward the mean
  // load by the sign of (mean − its load) (aux-loss-free balancing), the
  // loads summed over the ranks whose tokens differ.
  std::vector<std::vector<int64_t>> loads = st.tokens_per_expert;
  sum_expert_loads(loads, opts_.mesh.dp_cp);
  size_t j = 0;
  for (int64_t l = 0; l < n_stage_layers_; ++l) {
    std::vector<float>& bias = router_bias_[static_cast<size_t>(l)];
    if (bias.empty()) continue;
    const std::vector<int64_t>& load = loads[j++];
    double mean = 0;
    for (int64_t x : load)
      mean += static_cast<double>(x) / static_cast<double>(E);
    for (int64_t e = 0; e < E; ++e) {
      const double gap = mean - static_cast<double>(load[static_cast<size_t>(e)]);
      bias[static_cast<size_t>(e)] += static_cast<float>(cfg_.router_bias_rate * ((gap > 0) - (gap < 0)));
    }
  }
}

const std::vector<float>* Llama::router_bias_of_layer(int64_t layer) const {
  const int64_t l = layer - table_.stage.first_layer;
  if (l < 0 || l >= n_stage_layers_ || router_bias_[static_cast<size_t>(l)].empty()) return nullptr;
  return &router_bias_[static_cast<size_t>(l)];
}

void Llama::set_router_bias_of_layer(int64_t layer, const std::vector<float>& bias) {
  const std::vector<float>* here = router_bias_of_layer(layer);
  MT_CHECK(here != nullptr && here->size() == bias.size(), "no router bias of ", bias.size(),
           " experts for layer ", layer);
  router_bias_[static_cast<size_t>(layer - table_.stage.first_layer)] = bias;
}

}  // namespace mt

// The linear plan's construction from the plan table and the model's sites,
// its checks, its --explain text, the norms and the Partial gradients' sum.
#include "parallel/linear_plan.h"

#include <algorithm>
#include <numeric>
#include <sstream>

#include "core/device.h"
#include "core/error.h"
#include "core/exact_sum.h"
#include "ops/primitives.h"
#include "ops/rmsnorm.h"
#include "parallel/tp2d_linear.h"
#include "parallel/tp_comm.h"

namespace mt::tp {

const char* form_name(Form f) {
  switch (f) {
    case Form::local:
      return "local";
    case Form::megatron:
      return "megatron";
    case Form::grid:
      return "grid";
  }
  return "?";
}

bool LinearEntry::gathers() const {
  if (form == Form::grid) return use == SiteUse::linear || use == SiteUse::head;
  return form == Form::megatron && sp == SequenceParallel::on && use != SiteUse::embedding &&
         role != Role::row;
}

PartialGrads::PartialGrads(Group* over, float* scratch, int64_t n, SumOrder order)
    : over_(over), scratch_(scratch), n_(n), order_(order) {
  if (over_ != nullptr) zero_bytes(scratch_, n_ * int64_t{sizeof(float)});
}

void PartialGrads::finish(std::initializer_list<std::pair<float*, int64_t>> grads, std::string_view site,
                          std::string_view what, std::initializer_list<int64_t> shape) const {
  if (over_ == nullptr) return;
  const std::string label = comm_label(site, what, "backward", shape);
  if (order_ == SumOrder::library)
    over_->all_reduce(scratch_, n_, label);
  else
    over_->all_reduce(scratch_, n_, ElemType::f32, order_, label);
  const float* part = scratch_;
  for (const auto& [g, n] : grads) {
    add(g, part, n);
    part += n;
  }
}

namespace {

const PlanRow* find_row(const std::vector<PlanRow>& table, std::string_view suffix) {
  for (const PlanRow& r : table) {
    if (r.suffix == suffix) return &r;
  }
  return nullptr;
}

bool model_has(const std::vector<ModelSite>& sites, std::string_view suffix) {
  for (const ModelSite& s : sites) {
    for (const SiteWeight& w : s.weights) {
      if (w.suffix == suffix) return true;
    }
  }
  return false;
}

}  // namespace

void check_plan_sites(const std::vector<PlanRow>& table, const std::vector<ModelSite>& sites) {
  for (const PlanRow& r : table) {
    MT_REQUIRE(model_has(sites, r.suffix), ConfigError, "the tensor-parallel plan names site '",
               std::string(r.site), "' (weight '", std::string(r.suffix), "'), which the model lacks");
  }
  for (const ModelSite& s : sites) {
    for (const SiteWeight& w : s.weights) {
      const PlanRow* r = find_row(table, w.suffix);
      MT_REQUIRE(r != nullptr, ConfigError, "model site '", std::string(s.name), "' (weight '",
                 std::string(w.suffix), "') has no entry in the tensor-parallel plan");
      MT_REQUIRE(w.suffix != s.weights.front().suffix || r->site == s.name, ConfigError,
                 "the tensor-parallel plan puts weight '", std::string(w.suffix), "' at site '",
                 std::string(r->site), "', but the model's site is '", std::string(s.name), "'");
      MT_REQUIRE(r->role == w.role, ConfigError, "the tensor-parallel plan makes '", std::string(w.suffix),
                 "' (site '", std::string(s.name), "') ", role_name(r->role), ", but the model runs it as ",
                 role_name(w.role));
    }
  }
}

LinearPlan::LinearPlan(const std::vector<PlanRow>& table, const std::vector<ModelSite>& sites,
                       const TpGroups& g, int64_t model_width) {
  check_plan_sites(table, sites);
  const bool on = g.tp != nullptr && g.tp->size() > 1;
  form_ = !on ? Form::local : on_grid(g.grid) ? Form::grid : Form::megatron;
  if (form_ == Form::grid) {
    const Grid& grid = g.grid;
    MT_REQUIRE(
        g.tp_r != nullptr && g.tp_c != nullptr && g.tp_r->size() == grid.rows && g.tp_c->size() == grid.cols,
        ConfigError, "2-D tensor parallelism on a ", grid.rows, " x ", grid.cols,
        " grid needs its sub-axis groups: tp_r of ", grid.rows, " and tp_c of ", grid.cols,
        " ranks (ModelOptions::mesh.tp_r, tp_c, from tp2d::sub_axes)");
  }
  norms_.d = model_width;
  norms_.width = form_ == Form::grid ? model_width / g.tp->size() : model_width;
  if (form_ == Form::grid) norms_.sums = g.tp;
  if (form_ == Form::megatron && g.sp) norms_.partial = g.tp;
  if (g.canonical_d > 1) norms_.dpieces = g.canonical_d / (form_ == Form::grid ? g.tp->size() : 1);
  if (g.canonical_tp > 1 && form_ != Form::grid && g.canonical_d <= 1)
    norms_.shards = norms_.partial != nullptr ? g.canonical_tp / g.tp->size() : g.canonical_tp;
  cp_pieces_ = g.cp_pieces;
  if (g.cp_pieces > 1) norms_.shards = g.cp_pieces;  // canonical_tp is 1 (check_canonical)
  for (const ModelSite& s : sites) {
    std::vector<Role> roles;
    for (const SiteWeight& w : s.weights)
      roles.push_back(w.role);
    entries_.push_back(make_entry(s, roles, g));
    entries_.back().site = find_row(table, s.weights.front().suffix)->site;
    for (const SiteWeight& w : s.weights) {
      if (w.role == Role::kv_replicated) entries_.back().kv_site = find_row(table, w.suffix)->site;
    }
  }
}

LinearEntry LinearPlan::make_entry(const ModelSite& s, const std::vector<Role>& roles,
                                   const TpGroups& g) const {
  LinearEntry e;
  e.use = s.use;
  e.role = roles.front();
  e.form = s.use == SiteUse::norm || s.use == SiteUse::local ? Form::local : form_;
  e.in = s.in;
  e.out_blocks = s.out_blocks;
  e.vocab_rows = s.vocab;
  const bool row = e.role == Role::row;
  if (e.form == Form::megatron) {
    e.tp = g.tp;
    e.sp = g.sp ? SequenceParallel::on : SequenceParallel::off;
    e.overlap = g.overlap ? Overlap::on : Overlap::off;
    if (s.use != SiteUse::linear) e.vocab = g.tp;
    int64_t at = 0;
    for (size_t b = 0; b < roles.size() && b < s.out_blocks.size(); ++b) {
      if (roles[b] == Role::kv_replicated && g.kv != nullptr) {
        if (e.kv == nullptr) e.kv_first = at;
        e.kv = g.kv;
        e.kv_count += s.out_blocks[b];
      }
      at += s.out_blocks[b];
    }
  } else if (e.form == Form::grid) {
    const int64_t R = g.grid.rows;
    if (s.use == SiteUse::linear) {  // the model width over tp_r; the sharded side gathered over tp_r
      e.in = row ? s.in * R : s.in / R;
      for (int64_t& b : e.out_blocks)
        b = row ? b / R : b * R;
      e.gather = row ? g.tp_r : g.tp_c;
      e.scatter = row ? g.tp_c : g.tp_r;
    } else {
      e.in = s.in / R;
      e.vocab = g.tp_c;
      (s.use == SiteUse::head ? e.gather : e.scatter) = g.tp_c;
      if (s.use == SiteUse::head) e.reduce = g.tp_r;
    }
  }
  if (g.canonical_tp > 1 && (s.use == SiteUse::linear || s.use == SiteUse::head)) {
    e.pieces = g.canonical_tp / (form_ == Form::megatron ? g.tp->size() : 1);
    e.tp = form_ == Form::megatron ? g.tp : nullptr;
    if (s.kv_slots.on()) {  // the activation's kv blocks are the slots
      e.slots = s.kv_slots;
      e.out_blocks = {s.out_blocks.front(), e.slots.slots * e.slots.head_dim,
                      e.slots.slots * e.slots.head_dim};
    }
  }
  e.out = std::accumulate(e.out_blocks.begin(), e.out_blocks.end(), int64_t{0});
  if (g.canonical_d > 1 && (s.use == SiteUse::linear || s.use == SiteUse::head)) {
    // Both dims cut (canonical_tp_grid.h): the heads / hidden / vocabulary dim over tp_c, d over tp_r.
    const bool grid = form_ == Form::grid;
    e.pieces = std::max<int64_t>(g.canonical_tp, 1) / (grid ? g.grid.cols : 1);
    e.dpieces = g.canonical_d / (grid ? g.grid.rows : 1);
    e.tp = nullptr;
  }
  return e;
}

const LinearEntry& LinearPlan::entry(std::string_view site) const {
  for (const LinearEntry& e : entries_) {
    if (e.site == site) return e;
  }
  MT_THROW(ConfigError, "the linear plan has no site '", std::string(site), "'");
}

int64_t LinearPlan::rows(int64_t N) const {
  return norms_.partial != nullptr ? sp_local_tokens(N, *norms_.partial) : N;
}

void LinearPlan::norm_forward(float* out, float* rstd, const float* inp, const float* w, int64_t rows,
                              float eps, std::string_view label) const {
  if (norms_.dpieces > 0)
    return pieces2d_norm_forward(out, rstd, inp, w, rows, norms_.width, norms_.d, eps, norms_.dpieces,
                                 norms_.sums, label);
  if (norms_.sums != nullptr)
    tp2d::rmsnorm2d_forward(out, rstd, inp, w, rows, norms_.width, norms_.d, eps, *norms_.sums, label);
  else
    rmsnorm_forward(out, rstd, inp, w, rows, norms_.d, eps);
}

void LinearPlan::norm_backward(float* dinp, float* dw, const float* dout, const float* inp, const float* w,
                               const float* rstd, int64_t rows, std::string_view label) const {
  if (norms_.dpieces > 0)
    return pieces2d_norm_backward(dinp, dw, dout, inp, w, rstd, rows, norms_.width, norms_.d, norms_.dpieces,
                                  norms_.sums, label);
  if (norms_.sums != nullptr)
    tp2d::rmsnorm2d_backward(dinp, dw, dout, inp, w, rstd, rows, norms_.width, norms_.d, *norms_.sums, label);
  else if (norms_.shards > 0)
    norm_backward_shards(dinp, dw, dout, inp, w, rstd, rows, label);
  else
    rmsnorm_backward(dinp, dw, dout, inp, w, rstd, rows, norms_.d);
}

void LinearPlan::norm_backward_shards(float* dinp, float* dw, const float* dout, const float* inp,
                                      const float* w, const float* rstd, int64_t rows,
                                      std::string_view label) const {
  const int64_t S = norms_.shards, d = norms_.d;
  MT_CHECK(rows % S == 0, "the norms' rows (", rows, ") are not ", S, " token shards at ",
           std::string(label));
  const int64_t n = rows / S;
  // One shard: its sum accumulates into dw directly (under SP, PartialGrads' zeroed scratch).
  float* leaves = S > 1 && dw != nullptr ? scratch_.shards : nullptr;
  MT_CHECK(S == 1 || dw == nullptr || leaves != nullptr, "the norms' shard scratch is not bound");
  if (leaves != nullptr) zero_bytes(leaves, S * d * int64_t{sizeof(float)});
  for (int64_t s = 0; s < S; ++s) {
    const int64_t at = s * n * d;
    float* g = leaves != nullptr ? leaves + s * d : dw;
    rmsnorm_backward(dinp + at, g, dout + at, inp + at, w, rstd + s * n, n, d);
  }
  if (leaves == nullptr) return;
  sum_in_tree_order(leaves, leaves, static_cast<int>(S), d);  // the root in the first leaf
  add(dw, leaves, d);
}

namespace {

std::string over(const Group* g) {
  return " over " + g->axis();
}

// The forward's and the backward's collectives of one entry, in words.
std::pair<std::string, std::string> collectives(const LinearEntry& e) {
  if (e.form == Form::grid && e.use == SiteUse::linear)
    return {"all-gather input" + over(e.gather) + ", reduce-scatter output" + over(e.scatter),
            "all-gather dout" + over(e.scatter) + ", reduce-scatter dinp" + over(e.gather)};
  if (e.form == Form::grid && e.use == SiteUse::head)
    return {"all-gather input" + over(e.gather) + ", all-reduce logits" + over(e.reduce) +
                ", cross-entropy all-reduces" + over(e.vocab),
            "reduce-scatter dinp" + over(e.gather)};
  if (e.form == Form::grid && e.use == SiteUse::embedding)
    return {"reduce-scatter lookup" + over(e.scatter), "all-gather dout" + over(e.scatter)};
  if (e.form != Form::megatron) return {"none", "none"};
  const bool sp = e.sp == SequenceParallel::on;
  const std::string tp = over(e.tp);
  if (e.use == SiteUse::embedding)
    return {(sp ? "reduce-scatter lookup" : "all-reduce lookup") + tp, sp ? "all-gather dout" + tp : "none"};
  if (e.role == Role::row)
    return {(sp ? "reduce-scatter output" : "all-reduce output") + tp, sp ? "all-gather dout" + tp : "none"};
  std::string fwd = sp ? "all-gather input" + tp : "none (copy_to_tp)";
  if (e.use == SiteUse::head) fwd += ", cross-entropy all-reduces" + tp;
  std::string bwd = (sp ? "reduce-scatter dinp" : "all-reduce dinp") + tp;
  if (e.kv != nullptr) bwd += ", all-reduce replicated kv rows" + over(e.kv);
  if (e.slots.on() && e.kv != nullptr) bwd += " (the tree)";
  return {fwd, bwd};
}

}  // namespace

std::string LinearPlan::explain() const {
  std::ostringstream os;
  for (const LinearEntry& e : entries_) {
    if (e.use == SiteUse::norm || e.use == SiteUse::local) continue;
    const auto [fwd, bwd] = collectives(e);
    os << "plan | " << e.site << " | " << role_name(e.role) << " | " << form_name(e.form) << " | ";
    if (e.use == SiteUse::embedding)
      os << "lookup [" << e.vocab_rows.rows << " x " << e.in << "]";
    else
      os << "GEMM [" << e.in << " -> " << e.out << "]";
    os << " | forward: " << fwd << " | backward: " << bwd << " | sp "
       << (e.sp == SequenceParallel::on ? "on" : "off") << " | overlap "
       << (e.overlap == Overlap::on ? "on" : "off");
    if (e.pieces > 0) os << " | canonical: " << e.pieces << " pieces, summed in the tree";
    if (e.slots.on()) os << ", " << e.slots.slots << " kv slots for " << e.slots.heads << " kv heads";
    if (e.dpieces > 0) os << " x " << e.dpieces << " d pieces";
    os << "\n";
  }
  os << "plan | norms | replicated | " << form_name(form_) << " | width " << norms_.width << " of "
     << norms_.d << " | forward: "
     << (norms_.sums ? "all-reduce sums of squares" + over(norms_.sums) : std::string("none"))
     << " | backward: "
     << (norms_.sums                 ? "all-reduce sums" + over(norms_.sums)
         : norms_.partial != nullptr ? "all-reduce weight grads" + over(norms_.partial)
                                     : std::string("none"))
     << " | sp " << (norms_.partial ? "on" : "off");
  if (norms_.dpieces > 0) os << " | canonical: sums over " << norms_.dpieces << " d pieces, in the tree";
  if (norms_.shards > 0)
    os << " | canonical: weight grads over " << norms_.shards << " token shards, in the tree";
  if (cp_pieces_ > 1)
    os << " | canonical: every weight grad over " << cp_pieces_ << " cp pieces, in the tree";
  os << "\n";
  return os.str();
}

}  // namespace mt::tp

// A microbatch's router statistics (docs/MODEL.md "Mixture of experts"): the
// load-balancing loss pools the router rows of every MoE layer of the
// microbatch, so its value and its gradient need the counts summed over all
// of them, wherever the layout put them (docs/PARALLELISM.md "Expert
// parallelism"): over the ranks holding shares of the microbatch's tokens (cp,
// and tp under SP) and over the pipeline stages holding its MoE layers.
#include <cmath>
#include <limits>

#include "core/device_mirror.h"
#include "core/error.h"
#include "model/llama_internal.h"
#include "parallel/token_sums.h"

namespace mt {

void MoeTally::reset(int64_t k, int64_t E) {
  count.assign(static_cast<size_t>(k * E), 0);
  psum.assign(static_cast<size_t>(E), 0.0);
  zsum = 0;
  rows = 0;
  margin = std::numeric_limits<double>::infinity();
}

// E · Σ over slots s and experts e of (the share of rows whose s-th choice is
// e) · (the mean router probability of e): transformers'
// load_balancing_loss_func, the rows of every MoE layer pooled.
double MoeTally::aux_loss(int64_t E) const {
  if (rows == 0) return 0.0;
  const double R = static_cast<double>(rows);
  double sum = 0.0;
  for (size_t i = 0; i < count.size(); ++i)
    sum += static_cast<double>(count[i]) / R * (psum[i % psum.size()] / R);
  return static_cast<double>(E) * sum;
}

std::vector<float> MoeTally::aux_grad(int64_t E, double scale) const {
  const double R = static_cast<double>(rows);
  std::vector<float> g(static_cast<size_t>(E), 0.0f);
  for (int64_t e = 0; e < E; ++e) {
    int64_t picked = 0;
    for (size_t i = static_cast<size_t>(e); i < count.size(); i += static_cast<size_t>(E))
      picked += count[i];
    g[static_cast<size_t>(e)] = static_cast<float>(scale * static_cast<double>(E * picked) / (R * R));
  }
  return g;
}

std::vector<double> MoeTally::sums() const {
  std::vector<double> v;
  v.reserve(count.size() + psum.size() + 2);
  for (int64_t c : count)
    v.push_back(static_cast<double>(c));
  v.insert(v.end(), psum.begin(), psum.end());
  v.push_back(zsum);
  v.push_back(static_cast<double>(rows));
  return v;
}

void MoeTally::set_sums(const std::vector<double>& v) {
  MT_CHECK(v.size() == count.size() + psum.size() + 2, "router statistics of ", v.size(), " values");
  size_t i = 0;
  for (int64_t& c : count)
    c = std::llround(v[i++]);
  for (double& p : psum)
    p = v[i++];
  zsum = v[i++];
  rows = std::llround(v[i]);
}

namespace {
constexpr int64_t kExactFloat = int64_t{1} << 24;  // every integer below is a float

void put_double(float*& out, double x) {
  const auto hi = static_cast<float>(x);
  *out++ = hi;
  *out++ = static_cast<float>(x - static_cast<double>(hi));
}
double get_double(const float*& in) {
  const double hi = in[0], lo = in[1];
  in += 2;
  return hi + lo;
}
}  // namespace

void MoeTally::write_wire(float* out) const {
  MT_CHECK(rows < kExactFloat, "router statistics of ", rows, " rows exceed a float's exact integers");
  for (int64_t c : count)
    *out++ = static_cast<float>(c);
  for (double p : psum)
    put_double(out, p);
  put_double(out, zsum);
  *out = static_cast<float>(rows);
}

void MoeTally::read_wire(const float* in) {
  for (int64_t& c : count)
    c = static_cast<int64_t>(*in++);
  for (double& p : psum)
    p = get_double(in);
  zsum = get_double(in);
  rows = static_cast<int64_t>(*in);
}

int64_t Llama::tally_floats() const {
  const bool one_stage = has_embed() && has_head();
  return cfg_.moe() && !one_stage ? MoeTally::wire_floats(cfg_.top_k, cfg_.n_experts) : 0;
}

void Llama::moe_tally_forward(Slot& sl) {
  MoeTally& t = sl.tally;
  std::vector<double> v = t.sums();
  if (has_moe_layer()) {  // this stage's layers: each rank tallied its own tokens
    const auto n = static_cast<int64_t>(v.size());
    sum_router_statistics(v.data(), n, cp_group(), plan_.token_shards());
  }
  const int64_t at = Nl_ * cfg_.d_model;
  if (tally_floats() > 0 && !has_embed()) {  // plus the stages before this one
    MoeTally before;
    before.reset(cfg_.top_k, cfg_.n_experts);
    before.read_wire(HostView<float>(sl.resid[0].data() + at, tally_floats(), "moe routing").data());
    const std::vector<double> b = before.sums();
    for (size_t i = 0; i < v.size(); ++i)
      v[i] += b[i];
  }
  t.set_sums(v);
  if (tally_floats() > 0 && !has_head()) write_tally(t, sl.resid.back().data() + at);
}

// The tally onto the wire behind the activations on the run's device (a crossing in).
void Llama::write_tally(const MoeTally& t, float* wire) const {
  std::vector<float> host(static_cast<size_t>(tally_floats()));
  t.write_wire(host.data());
  copy_from_host(wire, host.data(), tally_floats() * int64_t{sizeof(float)}, "moe routing");
}

void Llama::moe_tally_backward(Slot& sl) {
  if (tally_floats() == 0) return;
  float* wire = buf_->dres.data() + Nl_ * cfg_.d_model;
  if (has_head())
    write_tally(sl.tally, wire);  // the totals, after the output's gradient
  else                            // the last stage's totals (this stage's margin stays its own)
    sl.tally.read_wire(HostView<float>(wire, tally_floats(), "moe routing").data());
}

double Llama::moe_aux_loss() const {
  return cfg_.moe() ? slots_[0]->tally.aux_loss(cfg_.n_experts) : 0.0;
}

double Llama::moe_z_loss() const {
  return cfg_.moe() ? slots_[0]->tally.z_loss() : 0.0;
}

}  // namespace mt

// `meshtrain plan`: the layouts of a model on a machine, ranked by predicted
// step time; one given layout in detail; a scaling study (docs/PLANNER.md).
#include <cstdio>
#include <fstream>

#include "cli/commands.h"
#include "config/config.h"
#include "core/atomic_dir.h"
#include "core/error.h"
#include "plan/memory.h"
#include "plan/print.h"

namespace mt {

namespace {

plan::PlanInput plan_input(const PlanArgs& a) {
  MT_REQUIRE(a.devices >= 1, ConfigError, "--devices (", a.devices, ") must be at least 1");
  MT_REQUIRE(a.global_batch >= 1, ConfigError, "--global-batch (", a.global_batch, ") must be at least 1");
  MT_REQUIRE(a.seq_len >= 0, ConfigError, "--seq-len (", a.seq_len, ") must be positive");
  MT_REQUIRE(a.top >= 1, ConfigError, "--top (", a.top, ") must be at least 1");
  MT_REQUIRE(a.attention == "flash" || a.attention == "materialized", ConfigError, "--attention '",
             a.attention, "' must be flash or materialized");
  MT_REQUIRE(a.grad_overlap == "backward" || a.grad_overlap == "none", ConfigError, "--grad-overlap '",
             a.grad_overlap, "' must be backward or none");
  const Config cfg = load_config(a.config, {});
  plan::PlanInput in;
  in.model = cfg.model;
  in.seq_len = a.seq_len > 0 ? a.seq_len : cfg.train.seq_len;
  in.model.max_seq_len = std::max(in.model.max_seq_len, in.seq_len);  // planning a longer context
  in.model.validate();
  in.devices = a.devices;
  in.global_batch = a.global_batch;
  in.flash_attention = a.attention == "flash";
  in.grad_overlap = a.grad_overlap == "backward";
  return in;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  MT_REQUIRE(out && (out << text), IoError, "cannot write ", path);
}

// The best layout of each device count, strong (same global batch) and weak
// (global batch scaled with the devices).
std::vector<plan::ScalingRow> scaling_rows(const PlanArgs& a, const plan::PlanInput& in,
                                           const plan::Machine& m, plan::LayoutSpec spec) {
  spec.has_dp = false;  // dp follows the device count
  std::vector<plan::ScalingRow> rows;
  for (const char* kind : {"strong", "weak"})
    for (int64_t n : a.scaling) {
      MT_REQUIRE(n >= 1, ConfigError, "--scaling: every device count must be at least 1, got ", n);
      plan::PlanInput x = in;
      x.devices = n;
      if (std::string(kind) == "weak")
        x.global_batch = std::max<int64_t>(1, in.global_batch * n / in.devices);
      const plan::PlanResult r = plan::search(x, m, spec);
      plan::ScalingRow row{kind, n, x.global_batch, !r.ranked.empty(), {}};
      if (row.found) row.best = r.ranked[0];
      rows.push_back(row);
    }
  return rows;
}

}  // namespace

int run_plan_command(const PlanArgs& a) {
  if (!a.json_out.empty()) check_file_writable(a.json_out, "--json");  // before the search, not after it
  const plan::PlanInput in = plan_input(a);
  const plan::Machine m = plan::load_machine(a.machine);
  const plan::LayoutSpec spec = plan::parse_layout(a.layout);
  std::printf("machine %s: %s\n", m.name.c_str(), m.description.c_str());
  // A layout with every size and the stage and microbatch given: that one,
  // in detail (a broken rule is the error).
  if (spec.complete() && spec.has_zero && spec.has_mbs) {
    const plan::Prediction p = plan::predict(in, spec.layout, m);
    std::printf("%s\n%s", plan::precision_note(m.precision).c_str(),
                plan::format_prediction(in, p, m).c_str());
    if (!p.fits) std::printf("  %s\n", plan::why_too_big(p, m, in.devices).c_str());
    if (!a.json_out.empty()) write_file(a.json_out, plan::prediction_json(in, p, m));
    return 0;
  }
  const plan::PlanLayout& f = spec.layout;  // unset fields hold 1
  const int64_t fixed = f.tp * f.pp * f.cp * (spec.has_dp ? f.dp : 1);
  MT_REQUIRE(in.devices % fixed == 0, ConfigError, spec.has_dp ? "dp (" + std::to_string(f.dp) + ") x " : "",
             "tp (", f.tp, ") x pp (", f.pp, ") x cp (", f.cp, ") of --layout = ", fixed,
             " does not divide --devices (", in.devices, ")");
  const plan::PlanResult r = plan::search(in, m, spec);
  MT_REQUIRE(!r.ranked.empty() || !r.too_big.empty(), ConfigError, "no layout of ", in.devices,
             " devices passes the trainer's rules for this model and batch (", r.invalid,
             " tried); the first refused: ", r.first_invalid_reason);
  std::fputs(plan::format_ranking(in, r, m, static_cast<int>(a.top)).c_str(), stdout);
  if (r.ranked.empty())
    std::printf("no layout fits; the fastest would be %s, but it %s\n",
                plan::to_string(r.too_big[0].layout).c_str(),
                plan::why_too_big(r.too_big[0], m, in.devices).c_str());
  std::vector<plan::ScalingRow> rows;
  if (!a.scaling.empty()) {
    rows = scaling_rows(a, in, m, spec);
    std::printf("\n%s", plan::format_scaling(in, rows).c_str());
  }
  if (!a.json_out.empty()) write_file(a.json_out, plan::plan_json(in, r, m, static_cast<int>(a.top), rows));
  return r.ranked.empty() ? 1 : 0;
}

}  // namespace mt

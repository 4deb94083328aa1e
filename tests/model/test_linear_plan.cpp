// The linear plan the model executes (parallel/linear_plan.h): a plan table
// that names a site the model lacks, leaves one of the model's sites without
// an entry, puts a weight at another site or gives it a role the model's data
// flow is not written for is refused when the model is built, naming the
// site; the default plan's --explain text has one line per linear site.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/llama.h"
#include "parallel/linear_plan.h"
#include "parallel/tp_plan.h"

namespace mt {
namespace {

ModelConfig tiny() {
  ModelConfig c;
  c.vocab_size = 50;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  c.max_seq_len = 8;
  return c;
}

// The ConfigError's text of building the model with `plan`; "" when it builds.
std::string refusal(const std::vector<tp::PlanRow>& plan) {
  ModelOptions o;
  o.plan = &plan;
  try {
    Llama m(tiny(), o);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::vector<tp::PlanRow> without(std::string_view suffix) {
  std::vector<tp::PlanRow> plan = tp::llama_plan();
  plan.erase(
      std::remove_if(plan.begin(), plan.end(), [&](const tp::PlanRow& r) { return r.suffix == suffix; }),
      plan.end());
  return plan;
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(LinearPlan, RefusesARowNamingASiteTheModelLacks) {
  std::vector<tp::PlanRow> plan = tp::llama_plan();
  plan.push_back({"self_attn.q_norm.weight", tp::Role::replicated, "R", "attn q norm"});
  const std::string msg = refusal(plan);
  EXPECT_TRUE(has(msg, "names site 'attn q norm' (weight 'self_attn.q_norm.weight'), which the model lacks"))
      << msg;
}

TEST(LinearPlan, RefusesAModelSiteWithoutAnEntry) {
  const std::string msg = refusal(without("mlp.down_proj.weight"));
  EXPECT_TRUE(has(msg, "model site 'mlp down' (weight 'mlp.down_proj.weight') has no entry")) << msg;
  const std::string kv = refusal(without("self_attn.v_proj.weight"));
  EXPECT_TRUE(has(kv, "model site 'attn qkv' (weight 'self_attn.v_proj.weight') has no entry")) << kv;
}

TEST(LinearPlan, RefusesARoleTheModelIsNotWrittenFor) {
  std::vector<tp::PlanRow> plan = tp::llama_plan();
  for (tp::PlanRow& r : plan) {
    if (r.suffix == "self_attn.o_proj.weight") r.role = tp::Role::column;
  }
  const std::string msg = refusal(plan);
  EXPECT_TRUE(
      has(msg, "makes 'self_attn.o_proj.weight' (site 'attn o') column, but the model runs it as row"))
      << msg;
}

TEST(LinearPlan, RefusesAWeightAtAnotherSite) {
  std::vector<tp::PlanRow> plan = tp::llama_plan();
  for (tp::PlanRow& r : plan) {
    if (r.suffix == "mlp.gate_proj.weight") r.site = "mlp gate";
  }
  const std::string msg = refusal(plan);
  EXPECT_TRUE(has(msg,
                  "puts weight 'mlp.gate_proj.weight' at site 'mlp gate', but the model's site is 'mlp "
                  "gate_up'"))
      << msg;
}

// One process: every entry is a plain GEMM; the widths are the config's
// (q|k|v: 16 → 4·4 + 2·2·4 = 32; gate|up: 16 → 2·24; the head 16 → 50).
TEST(LinearPlan, TheDefaultPlanBuildsAndExplainsEachLinearSite) {
  EXPECT_EQ(refusal(tp::llama_plan()), "");
  Llama m(tiny(), {});
  const std::string text = m.linear_plan().explain();
  const char* lines[] = {
      "plan | attn qkv | column | local | GEMM [16 -> 32] | forward: none | backward: none | sp off | "
      "overlap off\n",
      "plan | attn o | row | local | GEMM [16 -> 16] |",
      "plan | mlp gate_up | column | local | GEMM [16 -> 48] |",
      "plan | mlp down | row | local | GEMM [24 -> 16] |",
      "plan | embed | vocab | local | lookup [50 x 16] |",
      "plan | head | vocab | local | GEMM [16 -> 50] |",
      "plan | norms | replicated | local | width 16 of 16 | forward: none | backward: none | sp off\n",
  };
  for (const char* l : lines)
    EXPECT_TRUE(has(text, l)) << "missing '" << l << "' in\n" << text;
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 7) << text;
  EXPECT_EQ(m.linear_plan().rows(12), 12);
  EXPECT_EQ(m.linear_plan().width(), 16);
}

}  // namespace
}  // namespace mt

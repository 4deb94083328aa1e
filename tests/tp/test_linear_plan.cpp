// The linear plan's entries on real groups (parallel/linear_plan.h): 1-D tp
// over the world with and without SP, with replicated kv heads, and a 2 × 2
// grid on 4 ranks. Each entry's groups and widths, its --explain line, and
// that an entry's forward and backward are the layer math of its form (the
// same bits as tensor_parallel.h / tp2d_linear.h called directly).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "comm/mpi_test.h"
#include "mesh/mesh.h"
#include "parallel/linear_plan.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp2d_linear.h"
#include "tp_test_util.h"

namespace mt {
namespace {

// The model's sites at d = 16, this rank's q 8, kv 4 (each), ffn 12, vocab rows 25.
std::vector<tp::ModelSite> sites() {
  using tp::Role;
  using tp::SiteUse;
  return {
      {"attn qkv",
       SiteUse::linear,
       {{"self_attn.q_proj.weight", Role::column},
        {"self_attn.k_proj.weight", Role::kv_replicated},
        {"self_attn.v_proj.weight", Role::kv_replicated}},
       16,
       {8, 4, 4},
       {}},
      {"attn o", SiteUse::linear, {{"self_attn.o_proj.weight", Role::row}}, 8, {16}, {}},
      {"mlp gate_up",
       SiteUse::linear,
       {{"mlp.gate_proj.weight", Role::column}, {"mlp.up_proj.weight", Role::column}},
       16,
       {12, 12},
       {}},
      {"mlp down", SiteUse::linear, {{"mlp.down_proj.weight", Role::row}}, 12, {16}, {}},
      {"embed", SiteUse::embedding, {{"model.embed_tokens.weight", Role::vocab}}, 16, {}, {0, 25, 25}},
      {"head", SiteUse::head, {{"lm_head.weight", Role::vocab}}, 16, {25}, {}},
      {"norms",
       SiteUse::norm,
       {{"input_layernorm.weight", Role::replicated}, {"post_attention_layernorm.weight", Role::replicated}},
       0,
       {},
       {}},
      {"final norm", SiteUse::norm, {{"model.norm.weight", Role::replicated}}, 0, {}, {}},
      {"moe router", SiteUse::local, {{"block_sparse_moe.gate.weight", Role::replicated}}, 0, {}, {}},
      {"moe experts",
       SiteUse::local,
       {{"w1.weight", Role::replicated}, {"w3.weight", Role::replicated}, {"w2.weight", Role::replicated}},
       0,
       {},
       {}},
  };
}

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(LinearPlanGroups, MegatronWithAndWithoutSequenceParallelism) {
  Group& w = test::world();
  const std::string ax = " over " + w.axis();
  const tp::LinearPlan off(tp::llama_plan(), sites(),
                           {&w, false, false, {1, w.size()}, nullptr, nullptr, nullptr}, 16);
  const tp::LinearPlan sp(tp::llama_plan(), sites(), {&w, true, true, {1, w.size()}, nullptr, nullptr, &w},
                          16);
  EXPECT_EQ(off.form(), tp::Form::megatron);
  EXPECT_FALSE(off.entry("attn qkv").gathers());
  EXPECT_TRUE(sp.entry("attn qkv").gathers());
  EXPECT_FALSE(sp.entry("attn o").gathers());
  EXPECT_EQ(off.rows(8), 8);
  EXPECT_EQ(sp.rows(8), 8 / w.size());
  EXPECT_EQ(sp.token_shards(), &w);
  EXPECT_EQ(off.token_shards(), nullptr);
  // The kv rows of q|k|v: after q's 8, 4 + 4, summed over the kv group.
  EXPECT_EQ(sp.entry("attn qkv").kv_first, 8);
  EXPECT_EQ(sp.entry("attn qkv").kv_count, 8);
  EXPECT_EQ(off.entry("attn qkv").kv, nullptr);
  const std::string a = off.explain(), b = sp.explain();
  EXPECT_TRUE(has(a,
                  "plan | attn qkv | column | megatron | GEMM [16 -> 16] | forward: none (copy_to_tp) | "
                  "backward: all-reduce dinp" +
                      ax + " | sp off | overlap off\n"))
      << a;
  EXPECT_TRUE(has(a, "plan | attn o | row | megatron | GEMM [8 -> 16] | forward: all-reduce output" + ax +
                         " | backward: none |"))
      << a;
  EXPECT_TRUE(has(b, "plan | attn qkv | column | megatron | GEMM [16 -> 16] | forward: all-gather input" +
                         ax + " | backward: reduce-scatter dinp" + ax + ", all-reduce replicated kv rows" +
                         ax + " | sp on | overlap on\n"))
      << b;
  EXPECT_TRUE(has(b, "plan | mlp down | row | megatron | GEMM [12 -> 16] | forward: reduce-scatter output" +
                         ax + " | backward: all-gather dout" + ax + " |"))
      << b;
  EXPECT_TRUE(has(b, "| backward: all-reduce weight grads" + ax + " | sp on\n")) << b;
}

TEST(LinearPlanGroups, GridEntriesGatherOverOneSubAxisAndScatterOverTheOther) {
  Group& w = test::world();
  if (w.size() != 4) GTEST_SKIP() << "a 2 x 2 grid needs 4 ranks";
  const tp::Grid g{2, 2};
  const DeviceMesh mesh(w, MeshSizes{.tp = 4}, SubAxisSizes{.tp_rows = 2});  // the grid's tp_r, tp_c
  Group tp = mesh.group("tp");
  std::optional<Group> rows = mesh.sub_group(SubAxis::tp_r), cols = mesh.sub_group(SubAxis::tp_c);
  ASSERT_TRUE(rows && cols);
  struct {
    Group *tp_r, *tp_c;
  } ax{&*rows, &*cols};
  const tp::LinearPlan p(tp::llama_plan(), sites(), {&tp, false, false, g, ax.tp_r, ax.tp_c, nullptr}, 16);
  EXPECT_EQ(p.form(), tp::Form::grid);
  EXPECT_EQ(p.width(), 4);  // d / (R·C)
  const tp::LinearEntry& qkv = p.entry("attn qkv");
  EXPECT_EQ(qkv.gather, ax.tp_c);
  EXPECT_EQ(qkv.scatter, ax.tp_r);
  EXPECT_EQ(qkv.in, 8);                                         // d / R
  EXPECT_EQ(qkv.out_blocks, (std::vector<int64_t>{16, 8, 8}));  // R × this rank's
  const tp::LinearEntry& o = p.entry("attn o");
  EXPECT_EQ(o.gather, ax.tp_r);
  EXPECT_EQ(o.scatter, ax.tp_c);
  EXPECT_EQ(o.in, 16);
  EXPECT_EQ(o.out, 8);
  EXPECT_EQ(p.entry("head").reduce, ax.tp_r);
  EXPECT_EQ(p.entry("head").gather, ax.tp_c);
  EXPECT_EQ(p.entry("embed").scatter, ax.tp_c);
  const std::string text = p.explain();
  EXPECT_TRUE(has(text,
                  "plan | mlp gate_up | column | grid | GEMM [8 -> 48] | forward: all-gather input over "
                  "tp_c, reduce-scatter output over tp_r | backward: all-gather dout over tp_r, "
                  "reduce-scatter dinp over tp_c |"))
      << text;
  EXPECT_TRUE(has(text,
                  "plan | norms | replicated | grid | width 4 of 16 | forward: all-reduce sums of squares "
                  "over " +
                      tp.axis()))
      << text;
}

// An entry's forward and backward are the layer math of its form, the same
// bits: the row entry under SP against row_parallel_* with the same inputs.
TEST(LinearPlanGroups, AnEntryRunsItsFormsLayerMath) {
  Group& w = test::world();
  const int P = w.size();
  const tp::LinearPlan p(tp::llama_plan(), sites(), {&w, true, false, {1, P}, nullptr, nullptr, nullptr}, 16);
  const int64_t N = 4 * P, ICl = 8, OC = 16;
  const std::vector<float> x = test::random_vec(N * ICl, static_cast<uint32_t>(11 + w.rank()));
  const std::vector<float> wt = test::random_vec(OC * ICl, static_cast<uint32_t>(12 + w.rank()));
  const std::vector<float> dy = test::random_vec(N / P * OC, static_cast<uint32_t>(13 + w.rank()));
  std::vector<float> part(N * OC), gathered(N * OC), y1(N / P * OC), y2(N / P * OC);
  std::vector<float> dx1(N * ICl), dx2(N * ICl), dw1(OC * ICl, 0.f), dw2(OC * ICl, 0.f);
  tp::LinearPlan bound = p;
  bound.bind({part.data(), gathered.data(), nullptr, nullptr, nullptr});
  const tp::LinearEntry& e = bound.entry("attn o");
  bound.forward(y1.data(), nullptr, x.data(), wt.data(), N, e, "o");
  bound.backward(dx1.data(), dw1.data(), dy.data(), x.data(), wt.data(), N, e, "o");
  const tp::TpLayer layer{&w, "o", tp::SequenceParallel::on, tp::Overlap::off};
  tp::row_parallel_forward(y2.data(), part.data(), x.data(), wt.data(), N, ICl, OC, layer);
  tp::row_parallel_backward(dx2.data(), dw2.data(), gathered.data(), dy.data(), x.data(), wt.data(), N, ICl,
                            OC, layer);
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(dx1, dx2);
  EXPECT_EQ(dw1, dw2);
}

}  // namespace
}  // namespace mt

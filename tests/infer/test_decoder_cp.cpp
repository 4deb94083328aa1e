// The cached decoder under context parallelism (decoder.h), every rank of the
// world one cp rank: the logits of every step, prefill chunks (all rows) and
// decode steps, equal those of the one-process decoder in the same process
// within 1e-5, for the ring prefill and the all-gather one, with an f32 and
// an int8 cache and under dynamic RoPE scaling (keys rotated at attention).
// Two prompts of different lengths share the batch; on 3 ranks a 2-row step
// leaves rank 2 an empty block of rows. The comm ledger shows which scheme ran:
// the ring's cp−1 sends per layer and no q|k|v all-gather, or the all-gathers.
// Generation refuses, by name, the layouts it does not run: expert
// parallelism (ep = the world) and 2-D tensor parallelism (an R × 1 grid).
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "bounds.h"
#include "comm/context.h"
#include "comm/mpi_test.h"
#include "core/error.h"
#include "infer/decoder.h"
#include "infer_util.h"
#include "mesh/mesh.h"
#include "model/llama_double.h"

namespace mt {
namespace {

using testing::max_abs_diff;

struct Calls {
  int64_t ring_sends = 0, qkv_gathers = 0;
};

Calls calls_since(const Group& g, size_t mark) {
  Calls c;
  const std::vector<LedgerEntry>& all = g.context().ledger.entries();
  for (size_t i = mark; i < all.size(); ++i) {
    c.ring_sends += all[i].op == "send" && all[i].label == "generate cp prefill ring k,v";
    c.qkv_gathers += all[i].op == "all_gather" && all[i].label == "generate cp qkv";
  }
  return c;
}

// Steps of the batch {seq 0: 11 prompt tokens, seq 1: 3}: chunks of 5 (both
// sequences, then seq 0 alone, then seq 0's last token), a 2-row step of seq 1
// alone, then decode steps of one token each.
std::vector<std::vector<DecodeRows>> script(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return {{{0, a.data(), 5}, {1, b.data(), 3}},
          {{0, a.data() + 5, 5}},
          {{0, a.data() + 10, 1}},
          {{1, b.data() + 3, 2}},
          {{0, a.data() + 11, 1}, {1, b.data() + 5, 1}},
          {{0, a.data() + 12, 1}, {1, b.data() + 6, 1}}};
}

void check_layout(const std::string& scaling, cp::CpImpl impl, KvDtype dtype) {
  Group& cp = test::world();
  const int R = cp.size();
  const ModelConfig cfg = testing::tiny_config(scaling);
  Llama model(cfg, ModelOptions{});
  model.init(7);
  const std::vector<int32_t> ta = testing::tokens(16, 1), tb = testing::tokens(16, 2);
  KvCache one_cache(cfg.n_layers, 2, 16, cfg.n_kv_heads, cfg.head_dim(), dtype);
  KvCache cp_cache(cfg.n_layers, 2, 16, cfg.n_kv_heads, cfg.head_dim(), dtype, R, cp.rank());
  Decoder one(model, one_cache), dist(model, cp_cache, &cp, impl);
  const int64_t V = cfg.vocab_size;
  int step = 0;
  for (const std::vector<DecodeRows>& rows : script(ta, tb)) {
    int64_t M = 0;
    for (const DecodeRows& e : rows)
      M += e.n;
    std::vector<float> want(static_cast<size_t>(M * V)), got(static_cast<size_t>(M * V));
    one.step(rows, want.data(), /*all_logits=*/true);
    const size_t mark = cp.context().ledger.entries().size();
    dist.step(rows, got.data(), /*all_logits=*/true);
    const Calls c = calls_since(cp, mark);
    // Bound: 10× the one-process decoder's own distance from the double model
    // on the same rows (llama_double.h, testing::layout_tol), floor a sum of
    // max(d_model, ffn_hidden) terms, over the logits' scale. Where the double
    // model is not what the decoder computes (an int8 cache; dynamic scaling,
    // whose cached keys keep the frequencies of the length they came at), the
    // floor alone: the same arithmetic on other values.
    const bool f64_applies = dtype == KvDtype::f32 && scaling.find("dynamic") == std::string::npos;
    double d = 0, scale = 0;
    int64_t row0 = 0;
    for (const DecodeRows& e : rows) {
      const std::vector<int32_t>& seq = e.seq == 0 ? ta : tb;
      const int64_t t = (e.ids - seq.data()) + e.n;  // the sequence so far
      const std::vector<double> f64 = testing::llama_logits_f64(model, seq.data(), 1, t);
      const double* last = f64.data() + (t - e.n) * V;
      for (int64_t i = 0; i < e.n * V; ++i)
        scale = std::max(scale, std::abs(last[i]));
      d = std::max(d, testing::max_abs_diff_f64(want.data() + row0 * V, last, e.n * V));
      row0 += e.n;
    }
    if (f64_applies) {  // rounding is ~1e-6, a wrong model O(1)
      EXPECT_LT(d / scale, 1e-3) << "the double forward is not this model: " << scaling << ", step " << step;
    }
    const double tol =
        testing::layout_tol(f64_applies ? d / scale : 0.0, std::max(cfg.d_model, cfg.ffn_hidden)) * scale;
    EXPECT_TRUE(testing::below(max_abs_diff(got.data(), want.data(), M * V), tol, "cp decode"))
        << scaling << ", step " << step << ", rank " << cp.rank();
    const bool ring = impl == cp::CpImpl::ring && M > static_cast<int64_t>(rows.size());
    EXPECT_EQ(c.ring_sends, ring ? cfg.n_layers * (R - 1) : 0) << "step " << step;
    EXPECT_EQ(c.qkv_gathers, ring ? 0 : cfg.n_layers) << "step " << step;
    ++step;
  }
}

TEST(DecoderCp, RingPrefillEqualsOneProcess) {
  check_layout("none", cp::CpImpl::ring, KvDtype::f32);
  check_layout("yarn,factor=4,original_max_position_embeddings=8", cp::CpImpl::ring, KvDtype::f32);
  check_layout("dynamic,factor=4,original_max_position_embeddings=8", cp::CpImpl::ring, KvDtype::f32);
}

TEST(DecoderCp, RingPrefillWithAnInt8Cache) {
  check_layout("none", cp::CpImpl::ring, KvDtype::int8);
  check_layout("dynamic,factor=4,original_max_position_embeddings=8", cp::CpImpl::ring, KvDtype::int8);
}

TEST(DecoderCp, AllGatherPrefillEqualsOneProcess) {
  check_layout("none", cp::CpImpl::allgather, KvDtype::f32);
  check_layout("dynamic,factor=4,original_max_position_embeddings=8", cp::CpImpl::allgather, KvDtype::int8);
}

std::string decoder_error(Llama& model, KvCache& cache) {
  try {
    Decoder dec(model, cache);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DecoderRefusals, ExpertParallelism) {
  Group& world = test::world();
  ModelConfig cfg = testing::tiny_config();
  cfg.n_experts = 6;  // divisible by 2 and 3 ranks
  cfg.top_k = 2;
  cfg.expert_ffn_hidden = 16;
  ModelOptions mo;
  mo.mesh.ep = &world;
  Llama model(cfg, mo);
  KvCache cache(cfg.n_layers, 1, 8, cfg.n_kv_heads, cfg.head_dim());
  EXPECT_NE(
      decoder_error(model, cache)
          .find("generation does not run expert parallelism (ep = " + std::to_string(world.size()) + ")"),
      std::string::npos);
}

TEST(DecoderRefusals, TwoDimensionalTensorParallelism) {
  Group& world = test::world();
  if (world.size() != 2) GTEST_SKIP() << "a 2 × 1 grid of the 4 heads needs 2 ranks";
  const ModelConfig cfg = testing::tiny_config();
  ModelOptions mo;
  const DeviceMesh mesh(world, MeshSizes{.tp = 2}, SubAxisSizes{.tp_rows = 2});  // the grid's tp_r, tp_c
  Group tp = mesh.group("tp");
  std::optional<Group> rows = mesh.sub_group(SubAxis::tp_r), cols = mesh.sub_group(SubAxis::tp_c);
  ASSERT_TRUE(rows && cols);
  mo.mesh.tp = &tp;
  mo.grid = {2, 1};
  mo.mesh.tp_r = &*rows;
  mo.mesh.tp_c = &*cols;
  Llama model(cfg, mo);
  KvCache cache(cfg.n_layers, 1, 8, cfg.n_kv_heads / 2, cfg.head_dim());
  EXPECT_NE(
      decoder_error(model, cache).find("generation does not run 2-D tensor parallelism (a 2 × 1 tp grid)"),
      std::string::npos);
}

}  // namespace
}  // namespace mt

// What one training step of data parallelism puts on the wire, per ZeRO stage,
// checked against the comm ledger. The expectations are worked out here from
// the model's Hugging Face shapes and the stage's definition (data_parallel.h),
// not read back from the store: every collective of the step, its op, axis,
// element count (context.h: all_gather n, reduce_scatter P·n, all_reduce n)
// and bytes (4 per fp32 element).
//
// The model's sizes do not divide 2 or 4 (vocab 37, ffn 29, rows of k/v 6 and
// of the norms 18 on 4 ranks), so the padded shards of shard.h show up in the
// counts: a shard of a parameter is ceil(rows / P) rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "comm/context.h"
#include "comm/mpi_test.h"
#include "model/llama.h"
#include "model/params.h"
#include "parallel/data_parallel.h"

namespace mt {
namespace {

using test::world;

constexpr int64_t kSeq = 5;         // tokens per sequence
constexpr int64_t kMicrobatch = 2;  // sequences per microbatch
constexpr int64_t kBucketBytes = 4096;

ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab_size = 37;
  c.d_model = 18;  // 3 heads of 6, 1 kv head
  c.n_layers = 2;
  c.n_heads = 3;
  c.n_kv_heads = 1;
  c.ffn_hidden = 29;
  c.max_seq_len = 8;
  c.tie_embeddings = false;
  return c;
}

// A parameter as dim-0 rows of row_size elements (a 1-D norm weight [C] is C
// rows of 1).
struct Rows {
  int64_t rows, row_size;
};

// The parameters of each unit, in Hugging Face shapes [out, in]:
// unit 0 = embed_tokens, 1..L = decoder blocks, L+1 = final norm + lm_head.
std::vector<std::vector<Rows>> unit_shapes(const ModelConfig& c) {
  const int64_t C = c.d_model, H = c.n_heads, KV = c.n_kv_heads, D = c.d_model / c.n_heads, F = c.ffn_hidden,
                V = c.vocab_size;
  const std::vector<Rows> block = {
      {C, 1},       // input_layernorm
      {H * D, C},   // q_proj
      {KV * D, C},  // k_proj
      {KV * D, C},  // v_proj
      {C, H * D},   // o_proj
      {C, 1},       // post_attention_layernorm
      {F, C},       // gate_proj
      {F, C},       // up_proj
      {C, F},       // down_proj
  };
  std::vector<std::vector<Rows>> units;
  units.push_back({{V, C}});
  for (int64_t l = 0; l < c.n_layers; ++l)
    units.push_back(block);
  units.push_back({{C, 1}, {V, C}});
  return units;
}

int64_t unit_numel(const std::vector<Rows>& u) {
  int64_t n = 0;
  for (const Rows& r : u)
    n += r.rows * r.row_size;
  return n;
}

// One rank's shard of a unit: every parameter split by rows, ceil(rows / P) each.
int64_t unit_shard(const std::vector<Rows>& u, int64_t P) {
  int64_t n = 0;
  for (const Rows& r : u)
    n += (r.rows + P - 1) / P * r.row_size;
  return n;
}

// A ledger entry reduced to what the test predicts.
using Call = std::tuple<std::string, std::string, int64_t, int64_t>;  // op, axis, elements, bytes

std::vector<Call> calls_of(const std::vector<LedgerEntry>& entries) {
  std::vector<Call> out;
  for (const LedgerEntry& e : entries)
    out.emplace_back(e.op, e.axis, e.elements, e.bytes);
  std::sort(out.begin(), out.end());
  return out;
}

std::string show(const std::vector<Call>& calls) {
  std::string s;
  for (const auto& [op, axis, n, b] : calls)
    s += "  " + op + " " + axis + " " + std::to_string(n) + " el " + std::to_string(b) + " B\n";
  return s;
}

std::string show(const std::vector<LedgerEntry>& entries) {
  std::string s;
  for (const LedgerEntry& e : entries)
    s += "  " + e.op + " " + e.axis + " \"" + e.label + "\" " + std::to_string(e.elements) + " el\n";
  return s;
}

// The ledger of one step, split where the trainer's step splits: computing the
// gradients (begin_step … finish_grads) and applying them (grad_sum_squares,
// the optimizer on local_params, after_update).
struct StepLedger {
  std::vector<LedgerEntry> grads, update;
};

// One step by hand, as the trainer runs it. Every rank feeds its own tokens
// (they only have to be valid ids).
StepLedger run_step(int zero, int64_t microbatches, int64_t step_id) {
  const ModelConfig cfg = tiny_config();
  Group dp = world().split(0, world().rank(), "dp");
  DataParallelOptions o;
  o.zero = zero;
  o.bucket_bytes = kBucketBytes;
  ModelOptions mo;
  mo.max_batch = kMicrobatch;
  mo.max_seq = kSeq;
  Llama model(cfg, mo, std::make_unique<DataParallelStore>(make_units(make_param_table(cfg), cfg), dp, o));
  model.init(7);
  ParamStore& store = model.store();

  const int64_t n = microbatches * kMicrobatch * kSeq;
  std::vector<int32_t> inputs(static_cast<size_t>(n)), targets(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    inputs[static_cast<size_t>(i)] = static_cast<int32_t>((i * 5 + 3 * world().rank() + 1) % cfg.vocab_size);
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 11 + world().rank() + 2) % cfg.vocab_size);
  }

  CommContext& ctx = world().context();
  ctx.step = step_id;
  store.begin_step(microbatches);
  for (int64_t m = 0; m < microbatches; ++m) {
    const int64_t off = m * kMicrobatch * kSeq;
    store.begin_microbatch(m, m);
    model.forward(inputs.data() + off, targets.data() + off, kMicrobatch, kSeq);
    model.backward(1.0f / static_cast<float>(n * world().size()));
  }
  store.finish_grads();

  ctx.step = step_id + 1;
  (void)store.grad_sum_squares();
  float* p = store.local_params();
  const float* g = store.local_grads();
  for (int64_t i = 0; i < store.local_numel(); ++i)
    p[i] -= 1e-3f * g[i];
  store.after_update();
  ctx.step = -1;

  return {ctx.ledger.step_entries(step_id), ctx.ledger.step_entries(step_id + 1)};
}

// The all-reduce buckets of ZeRO 0/1: contiguous runs of units filled in
// backward order (the last unit first), each closed once it holds at least
// bucket_bytes; the last bucket takes what remains.
std::vector<int64_t> bucket_sizes(const std::vector<std::vector<Rows>>& units, int64_t bucket_bytes) {
  std::vector<int64_t> buckets;
  int64_t open = 0;
  for (auto u = units.rbegin(); u != units.rend(); ++u) {
    open += unit_numel(*u);
    if (open * 4 >= bucket_bytes) {
      buckets.push_back(open);
      open = 0;
    }
  }
  if (open > 0) buckets.push_back(open);
  return buckets;
}

struct Expected {
  std::vector<Call> grads, update;
};

Expected expected_calls(int zero, int64_t microbatches, int64_t P) {
  const auto units = unit_shapes(tiny_config());
  const int64_t L = static_cast<int64_t>(units.size()) - 2;
  auto gather = [&](int64_t n) { return Call{"all_gather", "dp", n, 4 * n}; };
  auto scatter = [&](int64_t n) { return Call{"reduce_scatter", "dp", P * n, 4 * P * n}; };
  Expected e;
  if (zero <= 1) {
    // Gradients all-reduced once, after the last microbatch's backward.
    for (int64_t b : bucket_sizes(units, kBucketBytes))
      e.grads.push_back({"all_reduce", "dp", b, 4 * b});
    // ZeRO 1: every rank updated its shards, which are then all-gathered unit by unit.
    if (zero == 1) {
      for (const auto& u : units)
        e.update.push_back(gather(unit_shard(u, P)));
    }
  } else {
    for (int64_t m = 0; m < microbatches; ++m) {
      // Each unit's gradient is reduce-scattered after its backward, every microbatch.
      for (const auto& u : units)
        e.grads.push_back(scatter(unit_shard(u, P)));
      if (zero == 3) {
        // Parameters gathered before each use: the embedding forward only (its
        // backward is a scatter-add that needs no weights), blocks and the
        // final unit forward and backward.
        e.grads.push_back(gather(unit_shard(units.front(), P)));
        for (int64_t l = 1; l <= L; ++l) {
          e.grads.push_back(gather(unit_shard(units[static_cast<size_t>(l)], P)));
          e.grads.push_back(gather(unit_shard(units[static_cast<size_t>(l)], P)));
        }
        e.grads.push_back(gather(unit_shard(units.back(), P)));
        e.grads.push_back(gather(unit_shard(units.back(), P)));
      }
    }
    // The gradient norm of sharded gradients: Σ g² (one double) summed over ranks.
    e.update.push_back({"all_reduce", "dp", 1, 8});
    if (zero == 2) {
      for (const auto& u : units)
        e.update.push_back(gather(unit_shard(u, P)));
    }
  }
  std::sort(e.grads.begin(), e.grads.end());
  std::sort(e.update.begin(), e.update.end());
  return e;
}

// Calls per unit name, for the ZeRO 2/3 collectives whose labels start with
// the unit's name ("embed", "layer 0", "final").
std::map<std::string, int> calls_per_unit(const std::vector<LedgerEntry>& entries, const std::string& op,
                                          const std::vector<std::string>& names) {
  std::map<std::string, int> out;
  for (const auto& name : names)
    out[name] = 0;
  for (const LedgerEntry& e : entries) {
    if (e.op != op) continue;
    for (const auto& name : names) {
      if (e.label.rfind(name + " ", 0) == 0) out[name] += 1;
    }
  }
  return out;
}

class DpLedger : public ::testing::TestWithParam<std::tuple<int, int64_t>> {};

TEST_P(DpLedger, StepMatchesAnalyticCollectives) {
  const auto [zero, microbatches] = GetParam();
  const int64_t P = world().size();
  const int64_t step_id = 1000 + 100 * zero + 10 * microbatches;  // step_id, step_id + 1: unique per case
  const StepLedger got = run_step(zero, microbatches, step_id);
  const Expected want = expected_calls(zero, microbatches, P);

  EXPECT_EQ(calls_of(got.grads), want.grads) << "gradient phase, got:\n"
                                             << show(got.grads) << "expected:\n"
                                             << show(want.grads);
  EXPECT_EQ(calls_of(got.update), want.update) << "update phase, got:\n"
                                               << show(got.update) << "expected:\n"
                                               << show(want.update);

  if (zero <= 1) {
    // The all-reduce volume is the whole model once per step, whatever the
    // number of microbatches, in more than one bucket.
    const auto units = unit_shapes(tiny_config());
    int64_t total = 0, reduced = 0, buckets = 0;
    for (const auto& u : units)
      total += unit_numel(u);
    for (const LedgerEntry& e : got.grads) {
      EXPECT_EQ(e.op, "all_reduce");
      EXPECT_EQ(e.axis, "dp");
      reduced += e.elements;
      buckets += 1;
    }
    EXPECT_EQ(reduced, total);
    EXPECT_EQ(total, make_param_table(tiny_config()).total);
    EXPECT_GE(buckets, 3);
  } else {
    // Per unit: one reduce-scatter per microbatch; ZeRO 3 gathers embed once,
    // every block and the final unit twice per microbatch.
    std::vector<std::string> names = {"embed", "final"};
    for (int64_t l = 0; l < tiny_config().n_layers; ++l)
      names.push_back("layer " + std::to_string(l));
    const auto scatters = calls_per_unit(got.grads, "reduce_scatter", names);
    const auto gathers = calls_per_unit(got.grads, "all_gather", names);
    for (const auto& name : names) {
      EXPECT_EQ(scatters.at(name), microbatches) << name;
      const int per_microbatch = zero < 3 ? 0 : name == "embed" ? 1 : 2;
      EXPECT_EQ(gathers.at(name), per_microbatch * microbatches) << name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ZeroStages, DpLedger,
                         ::testing::Combine(::testing::Values(0, 1, 2, 3),
                                            ::testing::Values(int64_t{1}, int64_t{2})),
                         [](const ::testing::TestParamInfo<std::tuple<int, int64_t>>& p) {
                           return "zero" + std::to_string(std::get<0>(p.param)) + "_m" +
                                  std::to_string(std::get<1>(p.param));
                         });

// The golden numbers themselves, worked by hand for the sizes above, so that a
// slip in the helpers cannot make the test agree with a wrong store.
TEST(DpLedgerGolden, HandWorkedShardSizes) {
  const auto units = unit_shapes(tiny_config());
  ASSERT_EQ(units.size(), 4u);
  // Block: norms 18 + q 18·18 + k, v 6·18 each + o 18·18 + gate, up 29·18 each + down 18·29.
  EXPECT_EQ(unit_numel(units[1]), 18 + 324 + 108 + 108 + 324 + 18 + 522 + 522 + 522);
  EXPECT_EQ(unit_numel(units[0]), 37 * 18);
  EXPECT_EQ(unit_numel(units[3]), 18 + 37 * 18);
  // P = 2: embed 19 rows of 18; block: 9 + 9·18 + 3·18 + 3·18 + 9·18 + 9 + 15·18 + 15·18 + 9·29.
  EXPECT_EQ(unit_shard(units[0], 2), 19 * 18);
  EXPECT_EQ(unit_shard(units[1], 2), 9 + 162 + 54 + 54 + 162 + 9 + 270 + 270 + 261);
  EXPECT_EQ(unit_shard(units[3], 2), 9 + 19 * 18);
  // P = 4: embed 10 rows; block: 5 + 5·18 + 2·18 + 2·18 + 5·18 + 5 + 8·18 + 8·18 + 5·29.
  EXPECT_EQ(unit_shard(units[0], 4), 10 * 18);
  EXPECT_EQ(unit_shard(units[1], 4), 5 + 90 + 36 + 36 + 90 + 5 + 144 + 144 + 145);
  EXPECT_EQ(unit_shard(units[3], 4), 5 + 10 * 18);
  // Buckets of 4096 B from the back: final (2736 B) + layer 1 → 3150; layer 0 → 2466; embed → 666.
  EXPECT_EQ(bucket_sizes(units, kBucketBytes), (std::vector<int64_t>{3150, 2466, 666}));
}

}  // namespace
}  // namespace mt

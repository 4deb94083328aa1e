// Vocab-parallel embedding and cross-entropy on tp = world size, against the
// one-process double references on the full table / logits, for vocabularies
// that tp divides (8) and does not (11; 3 on 4 ranks leaves rank 3 with only
// padding). Padded rows and columns hold 1e4: a result that read them would
// be far off. Targets include ignored tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bounds.h"
#include "comm/mpi_test.h"
#include "ops/reference.h"
#include "parallel/vocab_parallel.h"
#include "tp_test_util.h"

namespace mt {
namespace {

using test::block;
using test::rel_err;
using test::to_double;
using tp::SequenceParallel;

constexpr int64_t N = 8, C = 3;
constexpr int32_t kIgnore = -100;
constexpr float kPad = 1e4f;

// This rank's rows [begin, end) of full[V, C], then padding up to vs.rows.
std::vector<float> local_rows(const std::vector<float>& full, int64_t cols, const tp::VocabShard& vs) {
  auto out = block(full, cols, vs.begin, vs.end - vs.begin, 0, cols);
  out.resize(static_cast<size_t>(vs.rows * cols), kPad);
  return out;
}

std::vector<int32_t> ids_for(int64_t V, bool with_ignored) {
  std::vector<int32_t> ids(N);
  for (int64_t n = 0; n < N; ++n)
    ids[static_cast<size_t>(n)] = static_cast<int32_t>((5 * n + 2) % V);
  if (with_ignored) ids[2] = ids[5] = kIgnore;
  return ids;
}

class VocabParallel : public ::testing::TestWithParam<int64_t> {};

TEST_P(VocabParallel, EmbeddingMatchesFull) {
  const int64_t V = GetParam();
  const int P = test::world().size();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const tp::VocabShard vs = tp::vocab_shard(V, P, g.rank());
  const auto table = test::random_vec(V * C, 21), dout_full = test::random_vec(N * C, 22);
  const auto ids = ids_for(V, false);
  std::vector<double> out_ref(N * C), dtable_ref(V * C, 1.0);
  ref::embedding_forward(out_ref.data(), ids.data(), to_double(table).data(), N, C);
  ref::embedding_backward(dtable_ref.data(), to_double(dout_full).data(), ids.data(), N, C);
  const auto table_local = local_rows(table, C, vs);
  for (SequenceParallel sp : {SequenceParallel::off, SequenceParallel::on}) {
    const bool on = sp == SequenceParallel::on;
    const int64_t Nt = on ? N / P : N, n0 = on ? g.rank() * Nt : 0;
    const tp::TpLayer layer{&g, "embedding", sp};
    std::vector<float> out(Nt * C), dtable(vs.rows * C, 1.0f);
    tp::vocab_embedding_forward(out.data(), test::scratch(), ids.data(), table_local.data(), N, C, V, layer);
    // One rank holds each row, the others add zeros: exact.
    EXPECT_EQ(rel_err(out, block(out_ref, C, n0, Nt, 0, C)), 0.0) << "V " << V << " sp " << on;
    const auto dout = block(dout_full, C, n0, Nt, 0, C);
    tp::vocab_embedding_backward(dtable.data(), test::scratch(), dout.data(), ids.data(), N, C, V, layer);
    auto want = block(dtable_ref, C, vs.begin, vs.end - vs.begin, 0, C);
    want.resize(static_cast<size_t>(vs.rows * C), 1.0);  // padding rows untouched
    // A row sums at most N tokens' rows (|dout| ≤ 1) onto 1: test::dot_tol.
    EXPECT_TRUE(testing::below(rel_err(dtable, want), test::dot_tol(N, want, 1.0), "dtable"))
        << "V " << V << " sp " << on;
  }
}

TEST_P(VocabParallel, CrossEntropyMatchesFull) {
  const int64_t V = GetParam();
  const int P = test::world().size();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const tp::VocabShard vs = tp::vocab_shard(V, P, g.rank());
  auto logits = test::random_vec(N * V, 23, 4.0f);
  const auto targets = ids_for(V, true);
  constexpr float dloss = 0.125f;
  std::vector<double> loss_ref(N), lse_ref(N), dlogits_ref(N * V);
  ref::cross_entropy_forward(loss_ref.data(), lse_ref.data(), to_double(logits).data(), targets.data(), N, V,
                             kIgnore);
  ref::cross_entropy_backward(dlogits_ref.data(), to_double(logits).data(), lse_ref.data(), targets.data(),
                              dloss, N, V, kIgnore);
  // This rank's columns, padded with kPad.
  std::vector<float> local(static_cast<size_t>(N * vs.rows), kPad);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = vs.begin; v < vs.end; ++v)
      local[static_cast<size_t>(n * vs.rows + v - vs.begin)] = logits[static_cast<size_t>(n * V + v)];

  std::vector<float> loss(N), lse(N), dlocal(local.size());
  const size_t mark = test::ledger_mark(g);
  tp::vocab_cross_entropy_forward(loss.data(), lse.data(), local.data(), targets.data(), N, V, kIgnore, g,
                                  "head");
  tp::vocab_cross_entropy_backward(dlocal.data(), local.data(), lse.data(), targets.data(), dloss, N, V,
                                   kIgnore, g);
  // Bounds: the kernel works in double (its error, V + P terms of size ≤ |x| +
  // |lse|, is below γ^double_{2V}·(8 + |lse|)) and rounds lse and each loss
  // once to fp32 (u relative); the backward's dloss·exp(x − lse) takes the
  // fp32 lse (off by u·|lse|) and rounds once more, and the target's
  // − dloss adds u·|dloss·(p − 1)|.
  const double u = testing::kU32, dbl = testing::gamma_n(double(2 * V), testing::kU64);
  double scale_loss = 1e-30, scale_lse = 1e-30, e_loss = 0, e_lse = 0;
  for (int64_t n = 0; n < N; ++n) {
    const double dd = dbl * (8 + std::abs(lse_ref[n]));
    e_loss = std::max(e_loss, u * std::abs(loss_ref[n]) + dd);
    e_lse = std::max(e_lse, u * std::abs(lse_ref[n]) + dd);
    scale_loss = std::max(scale_loss, std::abs(loss_ref[n]));
    scale_lse = std::max(scale_lse, std::abs(lse_ref[n]));
  }
  EXPECT_TRUE(testing::below(rel_err(loss, loss_ref), e_loss / scale_loss * (1 + 1e-6), "loss"));
  EXPECT_TRUE(testing::below(rel_err(lse, lse_ref), e_lse / scale_lse * (1 + 1e-6), "lse"));
  EXPECT_EQ(loss[2], 0.0f);
  EXPECT_EQ(loss[5], 0.0f);
  std::vector<double> want(local.size(), 0.0);  // padded columns: zero gradient
  for (int64_t n = 0; n < N; ++n)
    for (int64_t v = vs.begin; v < vs.end; ++v)
      want[static_cast<size_t>(n * vs.rows + v - vs.begin)] = dlogits_ref[static_cast<size_t>(n * V + v)];
  double e_d = 0, scale_d = 1e-30;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] == kIgnore) continue;
    for (int64_t v = 0; v < V; ++v) {
      const double pv = std::exp(double(logits[n * V + v]) - lse_ref[n]);
      double e = dloss * pv * (u * std::abs(lse_ref[n]) + u + dbl * (8 + std::abs(lse_ref[n])));
      if (v == targets[n]) e += u * dloss * std::abs(pv - 1);
      e_d = std::max(e_d, e);
      scale_d = std::max(scale_d, std::abs(dlogits_ref[n * V + v]));
    }
  }
  EXPECT_TRUE(testing::below(rel_err(dlocal, want), e_d / scale_d * (1 + 1e-6), "dlogits"));
  for (int64_t c = 0; c < vs.rows; ++c)
    EXPECT_EQ(dlocal[static_cast<size_t>(2 * vs.rows + c)], 0.0f);

  // Three reductions of N values (f64), the full logits never gathered; none backward.
  const auto e = test::entries_since(g, mark, "tp");
  ASSERT_EQ(e.size(), 3u);
  const std::string n = " [" + std::to_string(N) + "]";
  const std::string labels[] = {"head: vocab_ce max forward" + n, "head: vocab_ce sumexp forward" + n,
                                "head: vocab_ce target forward" + n};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(e[i].op, "all_reduce");
    EXPECT_EQ(e[i].label, labels[i]);
    EXPECT_EQ(e[i].elements, N);
    EXPECT_EQ(e[i].bytes, 8 * N);
  }
}

INSTANTIATE_TEST_SUITE_P(Vocab, VocabParallel, ::testing::Values(int64_t{8}, int64_t{11}, int64_t{3}),
                         [](const ::testing::TestParamInfo<int64_t>& p) {
                           return std::string(p.param == 8 ? "V8" : p.param == 11 ? "V11" : "V3");
                         });

}  // namespace
}  // namespace mt

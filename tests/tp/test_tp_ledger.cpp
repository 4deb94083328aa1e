// What a column → SwiGLU → row MLP puts on the wire over tp, from the comm
// ledger, against the analytic counts (context.h: all_reduce n, all_gather n =
// this rank's block, reduce_scatter P·n = the whole input; 4 bytes per fp32).
//   SP off: forward 1 all-reduce of Y [N, C]; backward 1 all-reduce of dX [N, C].
//   SP on:  forward all-gather of X's [N/P, C] + reduce-scatter of Y's partial [N, C];
//           backward all-gather of dY's [N/P, C] + reduce-scatter of dX's partial [N, C].
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "comm/mpi_test.h"
#include "ops/swiglu.h"
#include "parallel/tensor_parallel.h"
#include "parallel/tp_plan.h"
#include "tp_test_util.h"

namespace mt {
namespace {

using tp::SequenceParallel;

struct Expect {
  std::string op, label;
  int64_t elements;
};

// The shape suffix tp_comm.h puts on its labels.
std::string shape(int64_t rows, int64_t cols) {
  return " [" + std::to_string(rows) + ", " + std::to_string(cols) + "]";
}

void expect_entries(const std::vector<LedgerEntry>& got, const std::vector<Expect>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].op, want[i].op) << i;
    EXPECT_EQ(got[i].label, want[i].label) << i;
    EXPECT_EQ(got[i].elements, want[i].elements) << got[i].label;
    EXPECT_EQ(got[i].bytes, 4 * want[i].elements) << got[i].label;
  }
}

void run_mlp_and_check(SequenceParallel sp) {
  const int P = test::world().size();
  DeviceMesh mesh = test::tp_mesh(P);
  Group g = mesh.group("tp");
  const int t = g.rank();
  const bool on = sp == SequenceParallel::on;
  constexpr int64_t N = 8, C = 6, F = 8;
  const int64_t Fl = F / P, Nt = on ? N / P : N;  // Nt: tokens held outside the TP region
  const auto Wgu = test::random_vec(2 * F * C, 1), Wd = test::random_vec(C * F, 2);
  const auto wgu = tp::shard_weight(Wgu.data(), 2 * F, C, {tp::Split::column, {F, F}}, t, P);
  const auto wd = tp::shard_weight(Wd.data(), C, F, {tp::Split::row, {}}, t, P);
  const auto x = test::random_vec(Nt * C, 3), dy = test::random_vec(Nt * C, 4);
  std::vector<float> x_full(on ? N * C : 0), gu(N * 2 * Fl), h(N * Fl), y(Nt * C);
  std::vector<float> dh(N * Fl), dgu(N * 2 * Fl), dx(Nt * C), dwgu(wgu.size()), dwd(wd.size());
  const tp::TpLayer up{&g, "layer 3 mlp up", sp}, down{&g, "layer 3 mlp down", sp};

  size_t mark = test::ledger_mark(g);
  tp::column_parallel_forward(gu.data(), on ? x_full.data() : nullptr, x.data(), wgu.data(), N, C, 2 * Fl,
                              up);
  swiglu_forward(h.data(), gu.data(), N, Fl);
  tp::row_parallel_forward(y.data(), test::scratch(), h.data(), wd.data(), N, Fl, C, down);
  const auto fwd = test::entries_since(g, mark, "tp");
  mark = test::ledger_mark(g);
  tp::row_parallel_backward(dh.data(), dwd.data(), test::scratch(), dy.data(), h.data(), wd.data(), N, Fl, C,
                            down);
  swiglu_backward(dgu.data(), dh.data(), gu.data(), N, Fl);
  tp::column_parallel_backward(dx.data(), dwgu.data(), test::scratch(), dgu.data(),
                               on ? x_full.data() : x.data(), wgu.data(), N, C, 2 * Fl, up);
  const auto bwd = test::entries_since(g, mark, "tp");

  if (!on) {
    expect_entries(fwd, {{"all_reduce", "layer 3 mlp down: reduce_from_tp forward" + shape(N, C), N * C}});
    expect_entries(bwd, {{"all_reduce", "layer 3 mlp up: copy_to_tp backward" + shape(N, C), N * C}});
  } else {
    expect_entries(fwd,
                   {{"all_gather", "layer 3 mlp up: gather_from_sp forward" + shape(N / P, C), N / P * C},
                    {"reduce_scatter", "layer 3 mlp down: scatter_to_sp forward" + shape(N, C), N * C}});
    expect_entries(bwd,
                   {{"all_gather", "layer 3 mlp down: scatter_to_sp backward" + shape(N / P, C), N / P * C},
                    {"reduce_scatter", "layer 3 mlp up: gather_from_sp backward" + shape(N, C), N * C}});
  }
}

TEST(TpLedger, MlpWithoutSequenceParallel) {
  run_mlp_and_check(SequenceParallel::off);
}
TEST(TpLedger, MlpWithSequenceParallel) {
  run_mlp_and_check(SequenceParallel::on);
}

}  // namespace
}  // namespace mt

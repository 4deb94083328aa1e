// What one microbatch of the tensor-parallel Llama puts on the wire, checked
// call by call against the comm ledger. The expected list is written out here
// from Megatron's scheme (llama.h, tp_comm.h), not read back from the model:
//
//   without SP, per layer: forward  all-reduce after o and after down
//                          backward all-reduce of the input gradient of
//                                   gate|up and of q|k|v
//   with SP, per layer:    forward  all-gather before q|k|v and gate|up,
//                                   reduce-scatter after o and down
//                          backward the transposes (2 all-gathers, 2
//                                   reduce-scatters), and one all-reduce of
//                                   the two norm weights' partial gradients
//
// plus the vocab-parallel embedding and cross-entropy at the ends, and the sum
// of a replicated kv head's gradient over its replicas when tp > n_kv_heads.
// Elements follow context.h (all_reduce n, all_gather this rank's block,
// reduce_scatter the whole input); bytes are 4 per fp32 element, 8 per f64.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/context.h"
#include "comm/mpi_test.h"
#include "mesh/mesh.h"
#include "model/llama.h"
#include "parallel/tp_plan.h"

namespace mt {
namespace {

using test::world;

// vocab 37 does not divide 2 or 4 (padded); 4 heads over 2 kv heads, so tp = 4
// replicates each kv head on two ranks.
ModelConfig tiny_config() {
  ModelConfig c;
  c.vocab_size = 37;
  c.d_model = 16;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_hidden = 24;
  c.max_seq_len = 8;
  return c;
}

struct Call {
  std::string op, axis, label;
  int64_t elements, bytes;
};

std::string shape(std::initializer_list<int64_t> dims) {
  std::string s = " [";
  const char* sep = "";
  for (int64_t d : dims) {
    s += sep + std::to_string(d);
    sep = ", ";
  }
  return s + "]";
}

std::string show(const std::vector<Call>& calls) {
  std::string s;
  for (const Call& c : calls)
    s += "  " + c.op + " " + c.axis + " \"" + c.label + "\" " + std::to_string(c.elements) + " el " +
         std::to_string(c.bytes) + " B\n";
  return s;
}

// The expected calls of one forward + backward on P ranks, N tokens.
std::vector<Call> expected(const ModelConfig& c, int64_t P, int64_t N, bool sp) {
  const int64_t C = c.d_model, D = c.head_dim(), Nl = N / P;
  const bool kv_replicated = c.n_kv_heads < P;
  const int64_t kv_rows = 2 * (kv_replicated ? 1 : c.n_kv_heads / P) * D;
  std::vector<Call> v;
  auto ar = [&](const std::string& label, int64_t rows, int64_t cols) {
    v.push_back({"all_reduce", "tp", label + shape({rows, cols}), rows * cols, 4 * rows * cols});
  };
  auto ag = [&](const std::string& label) {  // this rank's [N/P, C] block
    v.push_back({"all_gather", "tp", label + shape({Nl, C}), Nl * C, 4 * Nl * C});
  };
  auto rs = [&](const std::string& label) {  // the whole [N, C] input
    v.push_back({"reduce_scatter", "tp", label + shape({N, C}), N * C, 4 * N * C});
  };
  auto layer = [](int64_t l, const char* what) { return "layer " + std::to_string(l) + " " + what; };
  // forward
  if (sp)
    rs("embed: scatter_to_sp forward");
  else
    ar("embed: reduce_from_tp forward", N, C);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    if (sp) {
      ag(layer(l, "attn qkv: gather_from_sp forward"));
      rs(layer(l, "attn o: scatter_to_sp forward"));
      ag(layer(l, "mlp gate_up: gather_from_sp forward"));
      rs(layer(l, "mlp down: scatter_to_sp forward"));
    } else {
      ar(layer(l, "attn o: reduce_from_tp forward"), N, C);
      ar(layer(l, "mlp down: reduce_from_tp forward"), N, C);
    }
  }
  if (sp) ag("head: gather_from_sp forward");
  for (const char* part : {"max", "sumexp", "target"})
    v.push_back(
        {"all_reduce", "tp", std::string("head: vocab_ce ") + part + " forward" + shape({N}), N, 8 * N});
  // backward
  if (sp) {
    rs("head: gather_from_sp backward");
    ar("final norm: sp weight grads backward", 1, C);
  } else {
    ar("head: copy_to_tp backward", N, C);
  }
  for (int64_t l = c.n_layers - 1; l >= 0; --l) {
    if (sp) {
      ag(layer(l, "mlp down: scatter_to_sp backward"));
      rs(layer(l, "mlp gate_up: gather_from_sp backward"));
      ag(layer(l, "attn o: scatter_to_sp backward"));
    } else {
      ar(layer(l, "mlp gate_up: copy_to_tp backward"), N, C);
    }
    if (kv_replicated) {
      const int64_t n = kv_rows * C;
      v.push_back({"all_reduce", "tp_kv", layer(l, "attn k|v: replica grads backward") + shape({kv_rows, C}),
                   n, 4 * n});
    }
    if (sp) {
      rs(layer(l, "attn qkv: gather_from_sp backward"));
      ar(layer(l, "norms: sp weight grads backward"), 2, C);
    } else {
      ar(layer(l, "attn qkv: copy_to_tp backward"), N, C);
    }
  }
  if (sp) ag("embed: scatter_to_sp backward");
  return v;
}

void check_microbatch(bool sp) {
  const ModelConfig cfg = tiny_config();
  const int P = world().size();
  const DeviceMesh mesh(world(), MeshSizes{.tp = P},
                        SubAxisSizes{.kv_replicas = tp::kv_replicas(P, cfg.n_kv_heads)});
  Group tp = mesh.group("tp");
  std::optional<Group> tp_kv = mesh.sub_group(SubAxis::tp_kv);
  constexpr int64_t B = 2, T = 8, N = B * T;
  ModelOptions mo;
  mo.max_batch = B;
  mo.max_seq = T;
  mo.mesh.tp = &tp;
  mo.mesh.tp_kv = tp_kv ? &*tp_kv : nullptr;
  mo.sp = sp;
  Llama model(cfg, mo);
  model.init(3);
  std::vector<int32_t> inputs(N), targets(N);
  for (int64_t i = 0; i < N; ++i) {  // the same tokens on every tp rank
    inputs[static_cast<size_t>(i)] = static_cast<int32_t>((i * 5 + 1) % cfg.vocab_size);
    targets[static_cast<size_t>(i)] = static_cast<int32_t>((i * 11 + 2) % cfg.vocab_size);
  }
  const size_t mark = tp.context().ledger.entries().size();
  model.zero_grads();
  model.forward(inputs.data(), targets.data(), B, T);
  model.backward(1.0f / N);
  std::vector<Call> got;
  const auto& entries = tp.context().ledger.entries();
  for (size_t i = mark; i < entries.size(); ++i) {
    const LedgerEntry& e = entries[i];
    got.push_back({e.op, e.axis, e.label, e.elements, e.bytes});
  }
  const std::vector<Call> want = expected(cfg, P, N, sp);
  bool same = got.size() == want.size();
  for (size_t i = 0; same && i < got.size(); ++i) {
    same = got[i].op == want[i].op && got[i].axis == want[i].axis && got[i].label == want[i].label &&
           got[i].elements == want[i].elements && got[i].bytes == want[i].bytes;
  }
  EXPECT_TRUE(same) << "rank " << world().rank() << " recorded\n" << show(got) << "expected\n" << show(want);

  // Per layer: 2 reductions each way without SP; 2 all-gathers and 2
  // reduce-scatters each way with SP (the norm-gradient sum on top).
  int ag = 0, rs = 0, ar = 0;
  for (const Call& c : got) {
    if (c.label.rfind("layer 1 ", 0) != 0 || c.axis != "tp") continue;
    ag += c.op == "all_gather";
    rs += c.op == "reduce_scatter";
    ar += c.op == "all_reduce";
  }
  if (sp) {
    EXPECT_EQ(ag, 4);
    EXPECT_EQ(rs, 4);
    EXPECT_EQ(ar, 1);
  } else {
    EXPECT_EQ(ag + rs, 0);
    EXPECT_EQ(ar, 4);
  }
}

TEST(TpModelLedger, WithoutSequenceParallel) {
  check_microbatch(false);
}

TEST(TpModelLedger, WithSequenceParallel) {
  check_microbatch(true);
}

}  // namespace
}  // namespace mt

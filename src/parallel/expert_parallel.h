// Expert parallelism's rule: moving a mixture-of-experts layer's tokens to
// their experts and back (docs/PARALLELISM.md "Expert parallelism").
//
// A microbatch of N tokens routed to k experts each makes N·k choices, choice
// c = n·k + s being token n's s-th expert. The plan sorts the choices by
// expert, stably (within an expert in increasing c, so by token), so that each
// expert reads one contiguous block of rows and runs one GEMM chain over it.
//
//   dispatch  forward: xs[row] = x[token of the row's choice]   (tokens → expert blocks)
//             backward: dx[token] = Σ over its rows of dxs[row]  (expert blocks → tokens)
//   combine   forward: yk[c] = ys[row of c], zero for a dropped choice (expert blocks → choices)
//             backward: dys[row] = dyk[c of the row]            (choices → expert blocks)
//
// With one rank holding every expert (ep = 1) both are a local permutation.
// With ep > 1 the ep group's P ranks hold E/P experts each (rank j experts
// j·E/P …), and two conjugate steps sit between them and the experts:
//
//   to_experts    forward: the sorted rows go to the ranks holding their experts
//                 (all-to-all-v), regrouped expert-major: local expert j's block
//                 holds its rows from rank 0, then rank 1, … (each in the
//                 sender's sorted order). The per-expert counts travel first
//                 (one all-to-all, in plan()).
//   from_experts  its inverse: the expert-major rows back to the ranks and rows
//                 they came from (all-to-all-v).
//
// Forward runs dispatch → to_experts → experts → from_experts → combine; the
// backward runs combine_backward → to_experts → experts' backward →
// from_experts → dispatch_backward, the same two exchanges with the same counts.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "comm/group.h"
#include "core/device_mirror.h"

namespace mt::ep {

struct RoutePlan {
  int64_t choices = 0;          // N·k
  std::vector<int64_t> count;   // [E] rows each expert takes (after capacity)
  std::vector<int64_t> offset;  // [E + 1] first row of each expert's block
  std::vector<int64_t> order;   // [rows] the choice each row holds
  std::vector<int64_t> row_of;  // [choices] its row, −1 when dropped
  std::vector<int64_t> routed;  // [E] choices that picked each expert (before capacity)
  int64_t dropped = 0;          // choices over an expert's capacity
  int64_t rows() const { return offset.empty() ? 0 : offset.back(); }
  // The blocks this rank's experts compute over, expert-major: with ep = 1 the
  // same as count and offset; with ep > 1 the rows received from the ep group.
  std::vector<int64_t> lcount;   // [E/P] rows of each local expert
  std::vector<int64_t> loffset;  // [E/P + 1]
  // ep > 1: recv_count[i·E/P + j] rows from rank i for local expert j; the
  // rows (not elements) sent to and received from each rank.
  std::vector<int64_t> recv_count, send_rows, recv_rows;
  int64_t local_rows() const { return loffset.empty() ? 0 : loffset.back(); }
  // order and row_of on the run's device, for the row-moving kernels
  // (ops/moe_kernels.h): mirrored by plan(), a crossing labelled "moe routing".
  DeviceMirror<int64_t> order_dev, row_of_dev;
};

// parallel.ep's rules, each refused with a ConfigError naming the numbers:
// E experts split over ep ranks (check_experts_divide, which ExpertDispatch
// also calls), ep dividing dp x cp (the ep groups are runs of ep consecutive
// ranks of the flattened (dp, cp) index), and what expert parallelism is not
// built with yet: a capacity limit, LAMB. Config::validate calls it.
struct EpLayout {
  int64_t ep = 1;
  int64_t n_experts = 0;  // model.n_experts (0: a dense model)
  int64_t dp = 1, cp = 1;
  double capacity_factor = 0;  // model.capacity_factor
  bool lamb = false;           // train.optimizer = lamb
};
void check_expert_parallel(const EpLayout& l);
void check_experts_divide(int64_t n_experts, int64_t ep);

// The capacity of each expert for a group of `tokens` tokens: ceil(factor ·
// tokens · k / E); −1 (unlimited) when factor is 0 (dropless).
int64_t expert_capacity(double factor, int64_t tokens, int64_t k, int64_t E);

class ExpertDispatch {
 public:
  // group: the ep group (null or size 1: every expert here, a local permutation).
  ExpertDispatch(Group* group, int64_t n_experts);

  // The plan of `choices` choices with experts expert_of[c] in [0, E) (on the
  // host; the plan's index arrays are then mirrored to the run's device). An
  // expert keeps its first `capacity` choices in the sorted order (the lowest
  // choice indices: earlier tokens, then lower slots) and drops the rest
  // (capacity −1: none dropped).
  // With ep > 1 it exchanges the counts (collective; `label` names the call
  // in the comm ledger, e.g. "layer 0 moe forward").
  void plan(RoutePlan& p, const int32_t* expert_of, int64_t choices, int64_t capacity,
            std::string_view label = {}) const;

  // ep > 1: local[p.local_rows(), C] (expert-major) from sorted[p.rows(), C],
  // and its inverse; collective over the ep group. Called with ep = 1 they copy.
  void to_experts(float* local, const float* sorted, const RoutePlan& p, int64_t C,
                  std::string_view label) const;
  void from_experts(float* sorted, const float* local, const RoutePlan& p, int64_t C,
                    std::string_view label) const;
  // Whether the experts are spread over more than one rank.
  bool distributed() const { return group_ != nullptr && group_->size() > 1; }
  int64_t local_experts() const { return distributed() ? E_ / group_->size() : E_; }
  // The most rows this rank's experts can receive for a microbatch of `choices` choices.
  int64_t max_local_rows(int64_t choices) const { return distributed() ? choices * group_->size() : choices; }

  // xs[p.rows(), C] from x[N, C] (k choices per token); its backward adds into
  // dx[N, C] (assigned: dx is zeroed first).
  void dispatch(float* xs, const float* x, const RoutePlan& p, int64_t k, int64_t C) const;
  void dispatch_backward(float* dx, const float* dxs, const RoutePlan& p, int64_t k, int64_t C) const;
  // yk[choices, C] from ys[p.rows(), C]; its backward dys[p.rows(), C] from dyk.
  void combine(float* yk, const float* ys, const RoutePlan& p, int64_t C) const;
  void combine_backward(float* dys, const float* dyk, const RoutePlan& p, int64_t C) const;

  int64_t n_experts() const { return E_; }

 private:
  // ep > 1: the all-to-all of the counts (plan), and the row permutation
  // between the received (source-major) and the expert-major order.
  void exchange_counts(RoutePlan& p, std::string_view label) const;
  void move_rows(float* out, const float* in, const RoutePlan& p, int64_t C, bool to_expert_major) const;

  Group* group_ = nullptr;
  int64_t E_ = 0;
  mutable DeviceArray<float> scratch_;  // the received rows, source-major
};

}  // namespace mt::ep
